package redisstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/idem-go/idem/stores/storetest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type backend interface {
	redisstore.Client
	redis.UniversalClient
}

// both runs f against a client of each kind of deployment.
func both(t *testing.T, f func(t *testing.T, c backend)) {
	bothKinds(t, func(t *testing.T, kind string) { f(t, dial(t, kind)) })
}

func claimReq(key, nonce string) storekit.ClaimRequest {
	return storekit.ClaimRequest{Key: key, Nonce: nonce, LeaseTTL: 10 * time.Second, TakeoverAfter: 5 * time.Second}
}

func TestLifecycle(t *testing.T) {
	both(t, func(t *testing.T, c backend) {
		ctx := ctxT(t)
		s := newStore(t, c)
		key := storageKey()

		res, err := s.Claim(ctx, claimReq(key, "n1"))
		require.NoError(t, err)
		assert.Equal(t, storekit.Claimed, res.Outcome)
		r := res.Record
		assert.Equal(t, key, r.Key)
		assert.Equal(t, storekit.StatusInProgress, r.Status)
		assert.Equal(t, "n1", r.Nonce)
		assert.EqualValues(t, 1, r.Attempt)
		assert.Equal(t, r.StartedAt, r.HeartbeatAt)
		assert.EqualValues(t, 10_000, r.ExpiresAt-r.StartedAt)
		assert.Zero(t, r.CompletedAt)

		// The record's times are the server's clock.
		now, err := c.Time(ctx).Result()
		require.NoError(t, err)
		assert.InDelta(t, now.UnixMilli(), r.StartedAt, 2000)

		res, err = s.Claim(ctx, claimReq(key, "n2"))
		require.NoError(t, err)
		assert.Equal(t, storekit.Existing, res.Outcome)
		assert.Equal(t, "n1", res.Record.Nonce)

		// A retried claim that finds its own nonce is Claimed.
		res, err = s.Claim(ctx, claimReq(key, "n1"))
		require.NoError(t, err)
		assert.Equal(t, storekit.Claimed, res.Outcome)
		assert.EqualValues(t, 1, res.Record.Attempt)

		require.NoError(t, s.Heartbeat(ctx, key, "n1", 20*time.Second))
		got, err := s.Get(ctx, key)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, got.ExpiresAt-got.HeartbeatAt, int64(20_000))
		assert.ErrorIs(t, s.Heartbeat(ctx, key, "n2", time.Second), storekit.ErrLostOwnership)
		assert.ErrorIs(t, s.Complete(ctx, key, "n2", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Hour}), storekit.ErrLostOwnership)
		assert.ErrorIs(t, s.Release(ctx, key, "n2"), storekit.ErrLostOwnership)

		done := storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`{"id":7}`), TTL: time.Hour}
		require.NoError(t, s.Complete(ctx, key, "n1", done))
		// A retried complete that finds its own outcome succeeds.
		require.NoError(t, s.Complete(ctx, key, "n1", done))

		got, err = s.Get(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, storekit.StatusCompleted, got.Status)
		assert.Equal(t, []byte(`{"id":7}`), got.Result)
		assert.Nil(t, got.Error)
		assert.EqualValues(t, time.Hour.Milliseconds(), got.ExpiresAt-got.CompletedAt)
		assert.ErrorIs(t, s.Heartbeat(ctx, key, "n1", time.Second), storekit.ErrLostOwnership)
		assert.ErrorIs(t, s.Release(ctx, key, "n1"), storekit.ErrLostOwnership)

		res, err = s.Claim(ctx, claimReq(key, "n3"))
		require.NoError(t, err)
		assert.Equal(t, storekit.Existing, res.Outcome)
		assert.Equal(t, got, res.Record)

		// A completed record expires natively at its expires_at exactly.
		pexp, err := c.PExpireTime(ctx, s.Key(key)).Result()
		require.NoError(t, err)
		assert.EqualValues(t, got.ExpiresAt, pexp.Milliseconds())

		require.NoError(t, s.Delete(ctx, key))
		require.NoError(t, s.Delete(ctx, key))
		_, err = s.Get(ctx, key)
		assert.ErrorIs(t, err, storekit.ErrNotFound)
	})
}

func TestFailedAndEmptyResults(t *testing.T) {
	both(t, func(t *testing.T, c backend) {
		ctx := ctxT(t)
		s := newStore(t, c)

		k1 := storageKey()
		_, err := s.Claim(ctx, claimReq(k1, "a"))
		require.NoError(t, err)
		serr := &storekit.RecordedFailure{Message: "card declined", Type: "*pay.Error"}
		require.NoError(t, s.Complete(ctx, k1, "a", storekit.Completion{Status: storekit.StatusFailed, Error: serr, TTL: time.Hour}))
		got, err := s.Get(ctx, k1)
		require.NoError(t, err)
		assert.Equal(t, storekit.StatusFailed, got.Status)
		assert.Equal(t, serr, got.Error)
		assert.Nil(t, got.Result)

		// An empty, non-nil result stays empty and non-nil; binary bytes
		// survive.
		k2 := storageKey()
		_, err = s.Claim(ctx, claimReq(k2, "b"))
		require.NoError(t, err)
		require.NoError(t, s.Complete(ctx, k2, "b", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte{}, TTL: time.Hour}))
		got, err = s.Get(ctx, k2)
		require.NoError(t, err)
		assert.NotNil(t, got.Result)
		assert.Empty(t, got.Result)

		k3 := storageKey()
		bin := []byte{0, 1, 2, 0xff, '\r', '\n', 0}
		_, err = s.Claim(ctx, claimReq(k3, "c"))
		require.NoError(t, err)
		unavailable := &storekit.RecordedFailure{Message: "cannot encode", Type: storekit.ResultUnavailableType}
		require.NoError(t, s.Complete(ctx, k3, "c", storekit.Completion{Status: storekit.StatusCompleted, Result: bin, Error: unavailable, TTL: time.Hour}))
		got, err = s.Get(ctx, k3)
		require.NoError(t, err)
		assert.Equal(t, bin, got.Result)
		assert.Equal(t, unavailable, got.Error)

		// Bad completions are refused before any I/O.
		assert.Error(t, s.Complete(ctx, k3, "c", storekit.Completion{Status: storekit.StatusInProgress, TTL: time.Hour}))
		assert.Error(t, s.Complete(ctx, k3, "c", storekit.Completion{Status: storekit.StatusFailed, TTL: time.Hour}))
	})
}

func TestTakeoverAndRelease(t *testing.T) {
	both(t, func(t *testing.T, c backend) {
		ctx := ctxT(t)
		s := newStore(t, c)
		key := storageKey()
		req := storekit.ClaimRequest{Key: key, Nonce: "old", PayloadHash: "h", LeaseTTL: 10 * time.Second, TakeoverAfter: 100 * time.Millisecond}
		res, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, storekit.Claimed, res.Outcome)

		req.Nonce = "new"
		res, err = s.Claim(ctx, req)
		require.NoError(t, err)
		assert.Equal(t, storekit.Existing, res.Outcome, "heartbeat is fresh")

		time.Sleep(150 * time.Millisecond)
		// A different payload never takes over.
		other := req
		other.PayloadHash = "other"
		res, err = s.Claim(ctx, other)
		require.NoError(t, err)
		assert.Equal(t, storekit.Existing, res.Outcome)

		res, err = s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, storekit.TookOver, res.Outcome)
		assert.Equal(t, "new", res.Record.Nonce)
		assert.EqualValues(t, 2, res.Record.Attempt)
		assert.Equal(t, "h", res.Record.PayloadHash)

		// The stale owner can write nothing.
		assert.ErrorIs(t, s.Heartbeat(ctx, key, "old", time.Second), storekit.ErrLostOwnership)
		assert.ErrorIs(t, s.Complete(ctx, key, "old", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Hour}), storekit.ErrLostOwnership)
		assert.ErrorIs(t, s.Release(ctx, key, "old"), storekit.ErrLostOwnership)

		// Release keeps the attempt: the next claim is attempt 3.
		require.NoError(t, s.Release(ctx, key, "new"))
		_, err = s.Get(ctx, key)
		assert.ErrorIs(t, err, storekit.ErrNotFound)
		ttl, err := c.PTTL(ctx, s.Key(key)).Result()
		require.NoError(t, err)
		assert.Greater(t, ttl, 30*time.Second, "released record is kept for the buffer")

		req.Nonce = "third"
		res, err = s.Claim(ctx, req)
		require.NoError(t, err)
		assert.Equal(t, storekit.Claimed, res.Outcome)
		assert.EqualValues(t, 3, res.Record.Attempt)
	})
}

func TestExpiryByRecordField(t *testing.T) {
	both(t, func(t *testing.T, c backend) {
		ctx := ctxT(t)
		s := newStore(t, c)
		key := storageKey()
		_, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: "a", LeaseTTL: 100 * time.Millisecond, TakeoverAfter: time.Hour})
		require.NoError(t, err)
		time.Sleep(150 * time.Millisecond)
		// Redis still holds the key (buffer), but the record does not count.
		n, err := c.Exists(ctx, s.Key(key)).Result()
		require.NoError(t, err)
		assert.EqualValues(t, 1, n)
		_, err = s.Get(ctx, key)
		assert.ErrorIs(t, err, storekit.ErrNotFound)
		res, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: "b", LeaseTTL: time.Second, TakeoverAfter: time.Hour})
		require.NoError(t, err)
		assert.Equal(t, storekit.Claimed, res.Outcome)
		assert.EqualValues(t, 2, res.Record.Attempt)

		// A zero buffer still never sets an expiry in the past.
		s0 := newStore(t, c, redisstore.WithRetention(0))
		k0 := storageKey()
		_, err = s0.Claim(ctx, storekit.ClaimRequest{Key: k0, Nonce: "z", LeaseTTL: time.Hour, TakeoverAfter: time.Hour})
		require.NoError(t, err)
		require.NoError(t, s0.Release(ctx, k0, "z"))
	})
}

// rawRecord is a valid record: in_progress, live for a long time, heartbeat
// long ago with a 1ms takeover threshold (so stale), nonce "n".
func rawRecord(t *testing.T, key string) string {
	t.Helper()
	v, err := redisstore.Encode(&storekit.Record{Key: key, Status: storekit.StatusInProgress, Nonce: "n", Attempt: 1,
		StartedAt: 1, HeartbeatAt: 1, ExpiresAt: 9999999999999, TakeoverMs: 1})
	require.NoError(t, err)
	return v
}

func splice(v string, off int, s string) string { return v[:off] + s + v[off+len(s):] }

// TestCorruptRecords: a record that does not decode is ErrCorruptRecord for
// every operation, and no script writes to it (it is byte for byte the same
// afterwards), even when it looks stale and carries the caller's nonce.
func TestCorruptRecords(t *testing.T) {
	both(t, func(t *testing.T, c backend) {
		ctx := ctxT(t)
		s := newStore(t, c)
		cases := map[string]func(key string) string{
			"version 4":         func(k string) string { return splice(rawRecord(t, k), 0, "R4") },
			"version 1":         func(k string) string { return splice(rawRecord(t, k), 0, "R1") },
			"unknown status":    func(k string) string { return splice(rawRecord(t, k), 2, "Z") },
			"bad flags":         func(k string) string { return splice(rawRecord(t, k), 3, "g") },
			"version 2":         func(k string) string { return splice(rawRecord(t, k), 0, "R2") },
			"garbled attempt":   func(k string) string { return splice(rawRecord(t, k), 56, "00000000000x1") },
			"spaced heartbeat":  func(k string) string { return splice(rawRecord(t, k), 17, "            1") },
			"exponent started":  func(k string) string { return splice(rawRecord(t, k), 30, "0000000001e03") },
			"signed completed":  func(k string) string { return splice(rawRecord(t, k), 43, "+000000000000") },
			"attempt zero":      func(k string) string { return splice(rawRecord(t, k), 56, "0000000000000") },
			"failed no error":   func(k string) string { return splice(rawRecord(t, k), 2, "F") },
			"trailing byte":     func(k string) string { return rawRecord(t, k) + "x" },
			"truncated":         func(k string) string { v := rawRecord(t, k); return v[:len(v)-1] },
			"result no flag":    func(k string) string { return splice(rawRecord(t, k)+"r", 97, "0000000001") },
			"error type no err": func(k string) string { return splice(rawRecord(t, k)+"e", 117, "00001") },
			"other key":         func(k string) string { return rawRecord(t, "idem:other"+k[len("idem:other"):]) },
			"short":             func(k string) string { return "R3P0" },
			"relative no expiry": func(k string) string {
				v, err := redisstore.ClaimValue(storekit.ClaimRequest{Key: k, Nonce: "n", LeaseTTL: time.Minute}, time.Minute)
				require.NoError(t, err)
				return v
			},
			"relative with times": func(k string) string { return splice(rawRecord(t, k), 3, "4") },
			"not a record":        func(k string) string { return "not a record" },
		}
		for name, mk := range cases {
			t.Run(name, func(t *testing.T) {
				key := storageKey()
				before := mk(key)
				require.NoError(t, c.Set(ctx, s.Key(key), before, 0).Err())
				_, err := s.Get(ctx, key)
				assertCorrupt(t, err)
				_, err = s.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: "other", LeaseTTL: time.Minute, TakeoverAfter: time.Millisecond})
				assertCorrupt(t, err)
				assertCorrupt(t, s.Heartbeat(ctx, key, "n", time.Minute))
				assertCorrupt(t, s.Release(ctx, key, "n"))
				assertCorrupt(t, s.Complete(ctx, key, "n", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Minute}))
				after, err := c.Get(ctx, s.Key(key)).Result()
				require.NoError(t, err)
				assert.Equal(t, before, after, "a script wrote to a corrupt record")
			})
		}
		t.Run("wrong type", func(t *testing.T) {
			key := storageKey()
			require.NoError(t, c.HSet(ctx, s.Key(key), "v", "1").Err())
			_, err := s.Get(ctx, key)
			assertCorrupt(t, err)
			_, err = s.Claim(ctx, claimReq(key, "n"))
			assertCorrupt(t, err)
			assertCorrupt(t, s.Heartbeat(ctx, key, "n", time.Second))
			assertCorrupt(t, s.Complete(ctx, key, "n", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Second}))
			assertCorrupt(t, s.Release(ctx, key, "n"))
			// Delete clears it.
			require.NoError(t, s.Delete(ctx, key))
			res, err := s.Claim(ctx, claimReq(key, "n"))
			require.NoError(t, err)
			assert.Equal(t, storekit.Claimed, res.Outcome)
		})
	})
}

func assertCorrupt(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	assert.ErrorIs(t, err, storekit.ErrCorruptRecord)
	var ce *storekit.CorruptRecordError
	assert.True(t, errors.As(err, &ce), "want *storekit.CorruptRecordError, got %T: %v", err, err)
}

func TestOptionsAndInput(t *testing.T) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{})
	defer c.Close()
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	defer ring.Close()
	for name, f := range map[string]func() (*redisstore.Store, error){
		"nil client":         func() (*redisstore.Store, error) { return redisstore.New(nil) },
		"negative retention": func() (*redisstore.Store, error) { return redisstore.New(c, redisstore.WithRetention(-time.Second)) },
		"brace prefix":       func() (*redisstore.Store, error) { return redisstore.New(c, redisstore.WithPrefix("a{b")) },
		"watch timeout":      func() (*redisstore.Store, error) { return redisstore.New(c, redisstore.WithWatchTimeout(0)) },
		"health":             func() (*redisstore.Store, error) { return redisstore.New(c, redisstore.WithHealthInterval(-1)) },
		"nil option":         func() (*redisstore.Store, error) { return redisstore.New(c, nil) },
		"ack zero replicas":  func() (*redisstore.Store, error) { return redisstore.New(c, redisstore.WithReplicaAck(0, time.Second)) },
		"ack zero timeout":   func() (*redisstore.Store, error) { return redisstore.New(c, redisstore.WithReplicaAck(1, 0)) },
		"ack and async": func() (*redisstore.Store, error) {
			return redisstore.New(c, redisstore.WithReplicaAck(1, time.Second), redisstore.AcceptAsyncReplication())
		},
		"ack on a ring": func() (*redisstore.Store, error) {
			return redisstore.New(ring, redisstore.WithReplicaAck(1, time.Second))
		},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := f()
			assert.Nil(t, s)
			assert.ErrorIs(t, err, storekit.ErrInvalidOption)
			var oe *storekit.OptionError
			assert.ErrorAs(t, err, &oe)
		})
	}
	_, err := redisstore.New(nil, redisstore.WithPrefix("{"), nil, redisstore.WithReplicaAck(0, 0))
	storetest.CheckOptionErrors(t, err, "redisstore.New", "redisstore.WithPrefix", "redisstore.New", "redisstore.WithReplicaAck", "redisstore.WithReplicaAck")
	assert.Contains(t, err.Error(), "idem: redisstore.WithReplicaAck: replica count must be at least 1, got 0")
	s := mustNew(t, c, redisstore.WithRetention(0), redisstore.WithReplicaAck(1, time.Millisecond))
	_, err = s.Claim(ctx, claimReq("", "n"))
	assert.ErrorIs(t, err, storekit.ErrInvalidKey)
	_, err = s.Get(ctx, "")
	assert.ErrorIs(t, err, storekit.ErrInvalidKey)
	_, err = s.Claim(ctx, claimReq("idem:x", ""))
	assert.Error(t, err)
}

// TestKeys: a record's Redis key is the prefix and a 128-bit digest of the
// storage key as a hash tag: the first half of a Guard storage key's
// SHA-256, the SHA-256 of any other.
func TestKeys(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	defer c.Close()
	s := mustNew(t, c, redisstore.WithPrefix("p:"))
	sum := sha256.Sum256([]byte("idem:k"))
	assert.Equal(t, "p:{"+base64.RawURLEncoding.EncodeToString(sum[:16])+"}", s.Key("idem:k"))
	assert.Equal(t, "p:{"+base64.RawURLEncoding.EncodeToString(sum[:16])+"}:changed", s.Channel("idem:k"))
	g, err := idem.New[int](s)
	require.NoError(t, err)
	sk, err := guardinfo.StorageKey(g, "order-1")
	require.NoError(t, err)
	raw, err := hex.DecodeString(strings.TrimPrefix(sk, storekit.StorageKeyPrefix))
	require.NoError(t, err)
	assert.Equal(t, "p:{"+base64.RawURLEncoding.EncodeToString(raw[:16])+"}", s.Key(sk))
	assert.Len(t, s.Key(sk), len("p:")+24)
	// Not quite a Guard key (upper-case hex, one digit short or one too
	// many, a non-digit past the 128 bits the key keeps): hashed.
	h := len(storekit.StorageKeyPrefix)
	for _, k := range []string{strings.ToUpper(sk), sk[:len(sk)-1], sk + "0", sk[:h+40] + "g" + sk[h+41:], sk[:len(sk)-1] + ":"} {
		sum := sha256.Sum256([]byte(k))
		assert.Equal(t, "p:{"+base64.RawURLEncoding.EncodeToString(sum[:16])+"}", s.Key(k), k)
	}
}

func TestRedisErrorsAreWrapped(t *testing.T) {
	// Nothing listens on this port.
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	s := mustNew(t, c)
	defer s.Close()
	ctx := context.Background()
	_, err := s.Claim(ctx, claimReq("idem:x", "n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "redisstore: claim")
	assert.NotErrorIs(t, err, storekit.ErrLostOwnership)
	_, _, err = mustNew(t, c, redisstore.WithWatchTimeout(200*time.Millisecond)).Watch(ctx, "idem:x")
	assert.Error(t, err)
}

// TestSameSlot proves every key and channel of one operation hashes to one
// Cluster slot.
func TestSameSlot(t *testing.T) {
	c := cluster(t)
	ctx := ctxT(t)
	s := newStore(t, c)
	for range 20 {
		k := storageKey()
		a, err := c.ClusterKeySlot(ctx, s.Key(k)).Result()
		require.NoError(t, err)
		b, err := c.ClusterKeySlot(ctx, s.Channel(k)).Result()
		require.NoError(t, err)
		assert.Equal(t, a, b)
	}
}

// TestInvalidRequests: calls no Guard makes are refused with storekit's
// typed errors before anything is sent.
func TestInvalidRequests(t *testing.T) {
	ctx := ctxT(t)
	c, h := counted(t, "standalone")
	s := newStore(t, c)
	key := storageKey()
	h.reset()
	for name, r := range map[string]storekit.ClaimRequest{
		"empty nonce":    {Key: key, LeaseTTL: time.Minute, TakeoverAfter: time.Second},
		"zero takeover":  {Key: key, Nonce: "n", LeaseTTL: time.Minute},
		"sub-ms lease":   {Key: key, Nonce: "n", LeaseTTL: time.Microsecond, TakeoverAfter: time.Second},
		"negative lease": {Key: key, Nonce: "n", LeaseTTL: -time.Second, TakeoverAfter: time.Second},
	} {
		_, err := s.Claim(ctx, r)
		assert.ErrorIs(t, err, storekit.ErrInvalidRequest, name)
	}
	_, err := s.Claim(ctx, storekit.ClaimRequest{Nonce: "n", LeaseTTL: time.Minute, TakeoverAfter: time.Second})
	assert.ErrorIs(t, err, storekit.ErrInvalidKey)
	assert.ErrorIs(t, s.Complete(ctx, key, "n", storekit.Completion{Status: "done", TTL: time.Minute}), storekit.ErrInvalidRequest)
	assert.ErrorIs(t, s.Complete(ctx, key, "n", storekit.Completion{Status: storekit.StatusFailed, TTL: time.Minute}), storekit.ErrInvalidRequest)
	assert.ErrorIs(t, s.Heartbeat(ctx, key, "", time.Minute), storekit.ErrLostOwnership)
	assert.Zero(t, h.trips.Load(), "nothing was sent")
}
