package natsstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/natsstore"
	"github.com/idem-go/idem/stores/storetest"
)

func TestOptions(t *testing.T) {
	_, err := natsstore.New(nil, natsstore.WithClock(nil), natsstore.WithRetention(-time.Second), nil,
		natsstore.WithCleanup(0), natsstore.WithJetStream(nil), natsstore.WithLogger(nil))
	storetest.CheckOptionErrors(t, err, "natsstore.New", "natsstore.WithClock", "natsstore.WithRetention", "natsstore.New",
		"natsstore.WithCleanup", "natsstore.WithJetStream", "natsstore.WithLogger")
	_, err = natsstore.CreateBucket(context.Background(), nil, "x", natsstore.WithReplicas(0), natsstore.WithMaxAge(-time.Hour))
	storetest.CheckOptionErrors(t, err, "natsstore.CreateBucket", "natsstore.WithReplicas", "natsstore.WithMaxAge")
}

// counting counts the bucket operations a store sends: each is one round
// trip to the server.
type counting struct {
	natsstore.KeyValue
	n atomic.Int64
}

func (c *counting) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	c.n.Add(1)
	return c.KeyValue.Get(ctx, key)
}

func (c *counting) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	c.n.Add(1)
	return c.KeyValue.Update(ctx, key, value, rev)
}

func (c *counting) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	c.n.Add(2) // a publish and, when the key exists, a read
	return c.KeyValue.Create(ctx, key, value, opts...)
}

func TestRoundTrips(t *testing.T) {
	_, js := connect(t, testenv.NATSURL(t))
	kv := &counting{KeyValue: newBucket(t, js)}
	s, err := natsstore.New(kv)
	require.NoError(t, err)
	g, err := idem.New[int](s)
	require.NoError(t, err)
	ctx := ctxT(t)
	fn := func(context.Context) (int, error) { return 7, nil }

	v, err := g.Do(ctx, "k", fn)
	require.NoError(t, err)
	require.Equal(t, 7, v)
	assert.EqualValues(t, 2, kv.n.Swap(0), "fresh call")

	v, err = g.Do(ctx, "k", fn)
	require.NoError(t, err)
	require.Equal(t, 7, v)
	assert.EqualValues(t, 2, kv.n.Swap(0), "replay")

	// A key whose record was deleted is claimed through its deletion marker.
	sk, err := guardinfo.StorageKey(g, "k")
	require.NoError(t, err)
	require.NoError(t, s.Delete(ctx, sk))
	kv.n.Store(0)
	ran := false
	_, err = g.Do(ctx, "k", func(context.Context) (int, error) { ran = true; return 8, nil })
	require.NoError(t, err)
	assert.True(t, ran, "a deleted key runs again")
	t.Logf("fresh call after Delete: %d round trips", kv.n.Load())
}

// TestOwnerWritesFollowTakeover checks that the revision a store remembers
// for its own claim never lets it write over a takeover made elsewhere.
func TestOwnerWritesFollowTakeover(t *testing.T) {
	_, js := connect(t, testenv.NATSURL(t))
	kv := newBucket(t, js)
	clock := storetest.NewClock()
	a, err := natsstore.New(kv, natsstore.WithClock(clock.Now))
	require.NoError(t, err)
	b, err := natsstore.New(kv, natsstore.WithClock(clock.Now))
	require.NoError(t, err)
	ctx := ctxT(t)
	key := storetest.NewKey()
	req := storekit.ClaimRequest{Key: key, Nonce: storetest.NewNonce(), LeaseTTL: time.Minute, TakeoverAfter: time.Second}
	res, err := a.Claim(ctx, req)
	require.NoError(t, err)
	require.Equal(t, storekit.Claimed, res.Outcome)
	clock.Advance(2 * time.Second)
	req2 := req
	req2.Nonce = storetest.NewNonce()
	res, err = b.Claim(ctx, req2)
	require.NoError(t, err)
	require.Equal(t, storekit.TookOver, res.Outcome)

	require.ErrorIs(t, a.Heartbeat(ctx, key, req.Nonce, time.Minute), storekit.ErrLostOwnership)
	require.ErrorIs(t, a.Complete(ctx, key, req.Nonce, storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Minute}), storekit.ErrLostOwnership)
	require.ErrorIs(t, a.Release(ctx, key, req.Nonce), storekit.ErrLostOwnership)
	require.NoError(t, b.Complete(ctx, key, req2.Nonce, storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("1"), TTL: time.Minute}))
	rec, err := a.Get(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, req2.Nonce, rec.Nonce)
	assert.Equal(t, storekit.StatusCompleted, rec.Status)
}

func TestPurge(t *testing.T) {
	_, js := connect(t, testenv.NATSURL(t))
	kv := newBucket(t, js)
	clock := storetest.NewClock()
	s, err := natsstore.New(kv, natsstore.WithClock(clock.Now), natsstore.WithRetention(time.Second))
	require.NoError(t, err)
	ctx := ctxT(t)
	n, err := s.Purge(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "empty bucket")
	old, live := storetest.NewKey(), storetest.NewKey()
	for _, k := range []string{old, live} {
		nonce := storetest.NewNonce()
		_, err := s.Claim(ctx, storekit.ClaimRequest{Key: k, Nonce: nonce, LeaseTTL: time.Minute, TakeoverAfter: time.Second})
		require.NoError(t, err)
		if k == old {
			require.NoError(t, s.Release(ctx, k, nonce))
		}
	}
	// Another application's key in the same bucket is left alone.
	_, err = kv.Put(ctx, "other.app.key", []byte("x"))
	require.NoError(t, err)
	clock.Advance(2 * time.Second)
	n, err = s.Purge(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	_, err = kv.Get(ctx, natsstore.KVKey(old))
	assert.True(t, errors.Is(err, jetstream.ErrKeyNotFound), "purged: %v", err)
	_, err = s.Get(ctx, live)
	require.NoError(t, err)
}

// TestWatchWakesWaiter: a Guard in Wait mode is woken by the KV watch, not
// by its slow safety poll.
func TestWatchWakesWaiter(t *testing.T) {
	_, js := connect(t, testenv.NATSURL(t))
	s, err := natsstore.New(newBucket(t, js))
	require.NoError(t, err)
	ctx := ctxT(t)
	key := storetest.NewKey()
	changed, stop, err := s.Watch(ctx, key)
	require.NoError(t, err)
	defer stop()
	select {
	case <-changed:
		t.Fatal("woken before any change")
	case <-time.After(100 * time.Millisecond):
	}
	_, err = s.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: storetest.NewNonce(), LeaseTTL: time.Minute, TakeoverAfter: time.Second})
	require.NoError(t, err)
	select {
	case <-changed:
	case <-time.After(10 * time.Second):
		t.Fatal("not woken by a claim")
	}
}

func TestKeyMapping(t *testing.T) {
	for _, k := range []string{"idem:abc", "a.b/c=d", "é", "idem:step:00ff"} {
		kk := natsstore.KVKey(k)
		back, ok := natsstore.StorageKey(kk)
		require.True(t, ok, kk)
		require.Equal(t, k, back)
	}
	_, ok := natsstore.StorageKey("other.app.key")
	require.False(t, ok)
	_, ok = natsstore.StorageKey("abc=4")
	require.False(t, ok)
}
