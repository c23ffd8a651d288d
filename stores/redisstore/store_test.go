package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type backend interface {
	redisstore.Client
	redis.UniversalClient
}

// both runs f against the standalone server and the Cluster.
func both(t *testing.T, f func(t *testing.T, c backend)) {
	t.Run("standalone", func(t *testing.T) { f(t, standalone(t)) })
	t.Run("cluster", func(t *testing.T) { f(t, cluster(t)) })
}

func claimReq(key, nonce string) idem.ClaimRequest {
	return idem.ClaimRequest{Key: key, Nonce: nonce, LeaseTTL: 10 * time.Second, TakeoverAfter: 5 * time.Second}
}

func TestLifecycle(t *testing.T) {
	both(t, func(t *testing.T, c backend) {
		ctx := ctxT(t)
		s := newStore(t, c)
		key := storageKey()

		res, err := s.Claim(ctx, claimReq(key, "n1"))
		require.NoError(t, err)
		assert.Equal(t, idem.Claimed, res.Outcome)
		r := res.Record
		assert.Equal(t, key, r.Key)
		assert.Equal(t, idem.StatusInProgress, r.Status)
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
		assert.Equal(t, idem.Existing, res.Outcome)
		assert.Equal(t, "n1", res.Record.Nonce)

		// A retried claim that finds its own nonce is Claimed.
		res, err = s.Claim(ctx, claimReq(key, "n1"))
		require.NoError(t, err)
		assert.Equal(t, idem.Claimed, res.Outcome)
		assert.EqualValues(t, 1, res.Record.Attempt)

		require.NoError(t, s.Heartbeat(ctx, key, "n1", 20*time.Second))
		got, err := s.Get(ctx, key)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, got.ExpiresAt-got.HeartbeatAt, int64(20_000))
		assert.ErrorIs(t, s.Heartbeat(ctx, key, "n2", time.Second), idem.ErrLostOwnership)
		assert.ErrorIs(t, s.Complete(ctx, key, "n2", idem.Completion{Status: idem.StatusCompleted, TTL: time.Hour}), idem.ErrLostOwnership)
		assert.ErrorIs(t, s.Release(ctx, key, "n2"), idem.ErrLostOwnership)

		done := idem.Completion{Status: idem.StatusCompleted, Result: []byte(`{"id":7}`), TTL: time.Hour}
		require.NoError(t, s.Complete(ctx, key, "n1", done))
		// A retried complete that finds its own outcome succeeds.
		require.NoError(t, s.Complete(ctx, key, "n1", done))

		got, err = s.Get(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, idem.StatusCompleted, got.Status)
		assert.Equal(t, []byte(`{"id":7}`), got.Result)
		assert.Nil(t, got.Error)
		assert.EqualValues(t, time.Hour.Milliseconds(), got.ExpiresAt-got.CompletedAt)
		assert.ErrorIs(t, s.Heartbeat(ctx, key, "n1", time.Second), idem.ErrLostOwnership)
		assert.ErrorIs(t, s.Release(ctx, key, "n1"), idem.ErrLostOwnership)

		res, err = s.Claim(ctx, claimReq(key, "n3"))
		require.NoError(t, err)
		assert.Equal(t, idem.Existing, res.Outcome)
		assert.Equal(t, got, res.Record)

		// Native expiry = expires_at + buffer.
		pexp, err := c.PExpireTime(ctx, s.Key(key)).Result()
		require.NoError(t, err)
		assert.EqualValues(t, got.ExpiresAt+redisstore.DefaultExpiryBuffer.Milliseconds(), pexp.Milliseconds())

		require.NoError(t, s.Delete(ctx, key))
		require.NoError(t, s.Delete(ctx, key))
		_, err = s.Get(ctx, key)
		assert.ErrorIs(t, err, idem.ErrNotFound)
	})
}

func TestFailedAndEmptyResults(t *testing.T) {
	both(t, func(t *testing.T, c backend) {
		ctx := ctxT(t)
		s := newStore(t, c)

		k1 := storageKey()
		_, err := s.Claim(ctx, claimReq(k1, "a"))
		require.NoError(t, err)
		serr := &idem.StoredError{Message: "card declined", Type: "*pay.Error"}
		require.NoError(t, s.Complete(ctx, k1, "a", idem.Completion{Status: idem.StatusFailed, Error: serr, TTL: time.Hour}))
		got, err := s.Get(ctx, k1)
		require.NoError(t, err)
		assert.Equal(t, idem.StatusFailed, got.Status)
		assert.Equal(t, serr, got.Error)
		assert.Nil(t, got.Result)

		// An empty, non-nil result stays empty and non-nil; binary bytes
		// survive.
		k2 := storageKey()
		_, err = s.Claim(ctx, claimReq(k2, "b"))
		require.NoError(t, err)
		require.NoError(t, s.Complete(ctx, k2, "b", idem.Completion{Status: idem.StatusCompleted, Result: []byte{}, TTL: time.Hour}))
		got, err = s.Get(ctx, k2)
		require.NoError(t, err)
		assert.NotNil(t, got.Result)
		assert.Empty(t, got.Result)

		k3 := storageKey()
		bin := []byte{0, 1, 2, 0xff, '\r', '\n', 0}
		_, err = s.Claim(ctx, claimReq(k3, "c"))
		require.NoError(t, err)
		unavailable := &idem.StoredError{Message: "cannot encode", Type: idem.ResultUnavailableType}
		require.NoError(t, s.Complete(ctx, k3, "c", idem.Completion{Status: idem.StatusCompleted, Result: bin, Error: unavailable, TTL: time.Hour}))
		got, err = s.Get(ctx, k3)
		require.NoError(t, err)
		assert.Equal(t, bin, got.Result)
		assert.Equal(t, unavailable, got.Error)

		// Bad completions are refused before any I/O.
		assert.Error(t, s.Complete(ctx, k3, "c", idem.Completion{Status: idem.StatusInProgress, TTL: time.Hour}))
		assert.Error(t, s.Complete(ctx, k3, "c", idem.Completion{Status: idem.StatusFailed, TTL: time.Hour}))
	})
}

func TestTakeoverAndRelease(t *testing.T) {
	both(t, func(t *testing.T, c backend) {
		ctx := ctxT(t)
		s := newStore(t, c)
		key := storageKey()
		req := idem.ClaimRequest{Key: key, Nonce: "old", PayloadHash: "h", LeaseTTL: 10 * time.Second, TakeoverAfter: 100 * time.Millisecond}
		res, err := s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, idem.Claimed, res.Outcome)

		req.Nonce = "new"
		res, err = s.Claim(ctx, req)
		require.NoError(t, err)
		assert.Equal(t, idem.Existing, res.Outcome, "heartbeat is fresh")

		time.Sleep(150 * time.Millisecond)
		// A different payload never takes over.
		other := req
		other.PayloadHash = "other"
		res, err = s.Claim(ctx, other)
		require.NoError(t, err)
		assert.Equal(t, idem.Existing, res.Outcome)

		res, err = s.Claim(ctx, req)
		require.NoError(t, err)
		require.Equal(t, idem.TookOver, res.Outcome)
		assert.Equal(t, "new", res.Record.Nonce)
		assert.EqualValues(t, 2, res.Record.Attempt)
		assert.Equal(t, "h", res.Record.PayloadHash)

		// The stale owner can write nothing.
		assert.ErrorIs(t, s.Heartbeat(ctx, key, "old", time.Second), idem.ErrLostOwnership)
		assert.ErrorIs(t, s.Complete(ctx, key, "old", idem.Completion{Status: idem.StatusCompleted, TTL: time.Hour}), idem.ErrLostOwnership)
		assert.ErrorIs(t, s.Release(ctx, key, "old"), idem.ErrLostOwnership)

		// Release keeps the attempt: the next claim is attempt 3.
		require.NoError(t, s.Release(ctx, key, "new"))
		_, err = s.Get(ctx, key)
		assert.ErrorIs(t, err, idem.ErrNotFound)
		ttl, err := c.PTTL(ctx, s.Key(key)).Result()
		require.NoError(t, err)
		assert.Greater(t, ttl, 30*time.Second, "released record is kept for the buffer")

		req.Nonce = "third"
		res, err = s.Claim(ctx, req)
		require.NoError(t, err)
		assert.Equal(t, idem.Claimed, res.Outcome)
		assert.EqualValues(t, 3, res.Record.Attempt)
	})
}

func TestExpiryByRecordField(t *testing.T) {
	both(t, func(t *testing.T, c backend) {
		ctx := ctxT(t)
		s := newStore(t, c)
		key := storageKey()
		_, err := s.Claim(ctx, idem.ClaimRequest{Key: key, Nonce: "a", LeaseTTL: 100 * time.Millisecond, TakeoverAfter: time.Hour})
		require.NoError(t, err)
		time.Sleep(150 * time.Millisecond)
		// Redis still holds the key (buffer), but the record does not count.
		n, err := c.Exists(ctx, s.Key(key)).Result()
		require.NoError(t, err)
		assert.EqualValues(t, 1, n)
		_, err = s.Get(ctx, key)
		assert.ErrorIs(t, err, idem.ErrNotFound)
		res, err := s.Claim(ctx, idem.ClaimRequest{Key: key, Nonce: "b", LeaseTTL: time.Second, TakeoverAfter: time.Hour})
		require.NoError(t, err)
		assert.Equal(t, idem.Claimed, res.Outcome)
		assert.EqualValues(t, 2, res.Record.Attempt)

		// A zero buffer still never sets an expiry in the past.
		s0 := newStore(t, c, redisstore.WithExpiryBuffer(0))
		k0 := storageKey()
		_, err = s0.Claim(ctx, idem.ClaimRequest{Key: k0, Nonce: "z", LeaseTTL: time.Hour, TakeoverAfter: time.Hour})
		require.NoError(t, err)
		require.NoError(t, s0.Release(ctx, k0, "z"))
	})
}

func TestCorruptRecords(t *testing.T) {
	both(t, func(t *testing.T, c backend) {
		ctx := ctxT(t)
		s := newStore(t, c)
		good := func(key string) map[string]any {
			return map[string]any{"v": "1", "key": key, "status": "in_progress", "nonce": "n", "attempt": "1",
				"started_at": "1", "heartbeat_at": "1", "completed_at": "0", "expires_at": "99999999999999"}
		}
		cases := map[string]func(key string) map[string]any{
			"missing nonce":   func(k string) map[string]any { m := good(k); delete(m, "nonce"); return m },
			"garbled attempt": func(k string) map[string]any { m := good(k); m["attempt"] = "x1"; return m },
			"garbled expiry":  func(k string) map[string]any { m := good(k); m["expires_at"] = "soon"; return m },
			"garbled started": func(k string) map[string]any { m := good(k); m["started_at"] = "1.5"; return m },
			"missing done_at": func(k string) map[string]any { m := good(k); delete(m, "completed_at"); return m },
			"version 2":       func(k string) map[string]any { m := good(k); m["v"] = "2"; return m },
			"unknown status":  func(k string) map[string]any { m := good(k); m["status"] = "weird"; return m },
			"attempt zero":    func(k string) map[string]any { m := good(k); m["attempt"] = "0"; return m },
			"other key":       func(k string) map[string]any { m := good(k); m["key"] = "idem:other"; return m },
			"failed no error": func(k string) map[string]any { m := good(k); m["status"] = "failed"; return m },
			"huge number":     func(k string) map[string]any { m := good(k); m["heartbeat_at"] = "123456789012345678901234"; return m },
		}
		for name, mk := range cases {
			t.Run(name, func(t *testing.T) {
				key := storageKey()
				require.NoError(t, c.HSet(ctx, s.Key(key), mk(key)).Err())
				_, err := s.Get(ctx, key)
				assertCorrupt(t, err)
				_, err = s.Claim(ctx, claimReq(key, "other"))
				assertCorrupt(t, err)
			})
		}
		t.Run("wrong type", func(t *testing.T) {
			key := storageKey()
			require.NoError(t, c.Set(ctx, s.Key(key), "not a hash", 0).Err())
			_, err := s.Get(ctx, key)
			assertCorrupt(t, err)
			_, err = s.Claim(ctx, claimReq(key, "n"))
			assertCorrupt(t, err)
			assertCorrupt(t, s.Heartbeat(ctx, key, "n", time.Second))
			assertCorrupt(t, s.Complete(ctx, key, "n", idem.Completion{Status: idem.StatusCompleted, TTL: time.Second}))
			assertCorrupt(t, s.Release(ctx, key, "n"))
			// Delete clears it.
			require.NoError(t, s.Delete(ctx, key))
			res, err := s.Claim(ctx, claimReq(key, "n"))
			require.NoError(t, err)
			assert.Equal(t, idem.Claimed, res.Outcome)
		})
	})
}

func assertCorrupt(t *testing.T, err error) {
	t.Helper()
	require.Error(t, err)
	assert.ErrorIs(t, err, idem.ErrCorruptRecord)
	var ce *idem.CorruptRecordError
	assert.True(t, errors.As(err, &ce), "want *idem.CorruptRecordError, got %T: %v", err, err)
}

func TestOptionsAndInput(t *testing.T) {
	ctx := context.Background()
	for name, s := range map[string]*redisstore.Store{
		"nil client":      redisstore.New(nil),
		"negative buffer": redisstore.New(redis.NewClient(&redis.Options{}), redisstore.WithExpiryBuffer(-time.Second)),
		"brace prefix":    redisstore.New(redis.NewClient(&redis.Options{}), redisstore.WithPrefix("a{b")),
		"watch timeout":   redisstore.New(redis.NewClient(&redis.Options{}), redisstore.WithWatchTimeout(0)),
		"health":          redisstore.New(redis.NewClient(&redis.Options{}), redisstore.WithHealthInterval(-1)),
		"nil option":      redisstore.New(redis.NewClient(&redis.Options{}), nil),
	} {
		t.Run(name, func(t *testing.T) {
			var oe *redisstore.OptionError
			require.ErrorAs(t, s.Validate(), &oe)
			assert.ErrorIs(t, s.Validate(), idem.ErrInvalidOption)
			_, err := s.Claim(ctx, claimReq("idem:x", "n"))
			assert.ErrorIs(t, err, idem.ErrInvalidOption)
			_, err = s.Get(ctx, "idem:x")
			assert.ErrorIs(t, err, idem.ErrInvalidOption)
			assert.ErrorIs(t, s.Heartbeat(ctx, "idem:x", "n", time.Second), idem.ErrInvalidOption)
			assert.ErrorIs(t, s.Complete(ctx, "idem:x", "n", idem.Completion{Status: idem.StatusCompleted}), idem.ErrInvalidOption)
			assert.ErrorIs(t, s.Release(ctx, "idem:x", "n"), idem.ErrInvalidOption)
			assert.ErrorIs(t, s.Delete(ctx, "idem:x"), idem.ErrInvalidOption)
			_, _, err = s.Watch(ctx, "idem:x")
			assert.ErrorIs(t, err, idem.ErrInvalidOption)
			assert.NoError(t, s.Close())
		})
	}
	s := redisstore.New(redis.NewClient(&redis.Options{}))
	assert.NoError(t, s.Validate())
	_, err := s.Claim(ctx, claimReq("", "n"))
	assert.ErrorIs(t, err, idem.ErrInvalidKey)
	_, err = s.Get(ctx, "")
	assert.ErrorIs(t, err, idem.ErrInvalidKey)
	_, err = s.Claim(ctx, claimReq("idem:x", ""))
	assert.Error(t, err)
	assert.Equal(t, "p:{idem:k}", redisstore.New(nil, redisstore.WithPrefix("p:")).Key("idem:k"))
}

func TestRedisErrorsAreWrapped(t *testing.T) {
	// Nothing listens on this port.
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	s := redisstore.New(c)
	defer s.Close()
	ctx := context.Background()
	_, err := s.Claim(ctx, claimReq("idem:x", "n"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "redisstore: claim")
	assert.NotErrorIs(t, err, idem.ErrLostOwnership)
	_, _, err = redisstore.New(c, redisstore.WithWatchTimeout(200*time.Millisecond)).Watch(ctx, "idem:x")
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

// TestLaxNumbersAreCorruptForWrites: a field the decoder rejects ("1.0",
// "1e3", "0x10", " 7") or an err_type without err_msg makes every script
// report the record corrupt and leave it alone; no script takes over,
// refreshes, completes or releases a record that then reads back as
// corrupt.
func TestLaxNumbersAreCorruptForWrites(t *testing.T) {
	both(t, func(t *testing.T, c backend) {
		ctx := ctxT(t)
		s := newStore(t, c)
		stale := func(key string) map[string]any {
			// in_progress, live for a long time, heartbeat long ago: stale.
			return map[string]any{"v": "1", "key": key, "status": "in_progress", "nonce": "n", "attempt": "1",
				"started_at": "1", "heartbeat_at": "1", "completed_at": "0", "expires_at": "99999999999999"}
		}
		cases := map[string]func(key string) map[string]any{
			"float completed_at": func(k string) map[string]any { m := stale(k); m["completed_at"] = "0.0"; return m },
			"exponent started":   func(k string) map[string]any { m := stale(k); m["started_at"] = "1e3"; return m },
			"hex attempt":        func(k string) map[string]any { m := stale(k); m["attempt"] = "0x10"; return m },
			"spaced heartbeat":   func(k string) map[string]any { m := stale(k); m["heartbeat_at"] = " 1"; return m },
			"err_type alone":     func(k string) map[string]any { m := stale(k); m["err_type"] = "x"; return m },
		}
		for name, mk := range cases {
			t.Run(name, func(t *testing.T) {
				key := storageKey()
				require.NoError(t, c.HSet(ctx, s.Key(key), mk(key)).Err())
				before, err := c.HGetAll(ctx, s.Key(key)).Result()
				require.NoError(t, err)
				_, err = s.Get(ctx, key)
				assertCorrupt(t, err)
				_, err = s.Claim(ctx, idem.ClaimRequest{Key: key, Nonce: "other", LeaseTTL: time.Minute, TakeoverAfter: time.Millisecond})
				assertCorrupt(t, err)
				assertCorrupt(t, s.Heartbeat(ctx, key, "n", time.Minute))
				assertCorrupt(t, s.Release(ctx, key, "n"))
				assertCorrupt(t, s.Complete(ctx, key, "n", idem.Completion{Status: idem.StatusCompleted, TTL: time.Minute}))
				after, err := c.HGetAll(ctx, s.Key(key)).Result()
				require.NoError(t, err)
				assert.Equal(t, before, after, "a script wrote to a corrupt record")
			})
		}
	})
}
