package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCompleteIfEq: on Valkey 8.1 a fresh call's completion is one native
// SET ... IFEQ (no script); the record it writes is what the complete
// script writes, with the server's times: completed_at within the reading's
// error of the server's TIME, a native expiry that is its expires_at
// exactly. A completion whose claim is gone writes nothing and reports the
// lost ownership; one of a key a waiter watches falls back to the script,
// which publishes. Standalone Redis 7.0 has no IFEQ: the store keeps the
// script.
func TestCompleteIfEq(t *testing.T) {
	for _, kind := range []string{"valkey", "valkey-cluster"} {
		t.Run(kind, func(t *testing.T) { testCompleteIfEq(t, kind) })
	}
	// Redis 7.0: no IFEQ, the script completes.
	ctx := ctxT(t)
	for _, c := range []backend{standalone(t), cluster(t)} {
		r := newStore(t, c)
		ok, err := r.ReadServerClock(ctx, storageKey())
		require.NoError(t, err)
		assert.False(t, ok, "Redis 7.0 has no SET ... IFEQ")
	}
}

func testCompleteIfEq(t *testing.T, kind string) {
	ctx := ctxT(t)
	c, h := counted(t, kind)
	s := newStore(t, c)
	require.NoError(t, s.LoadScripts(ctx))
	readClock := func(key string) {
		t.Helper()
		ok, err := s.ReadServerClock(ctx, key)
		require.NoError(t, err)
		require.True(t, ok, "Valkey 8.1 has SET ... IFEQ")
	}

	g, err := idem.New[int](s)
	require.NoError(t, err)
	sk, err := g.StorageKey("order-1")
	require.NoError(t, err)
	readClock(sk)
	h.reset()
	before, err := c.Time(ctx).Result()
	require.NoError(t, err)
	v, err := g.Do(ctx, "order-1", func(context.Context) (int, error) { return 42, nil })
	require.NoError(t, err)
	after, err := c.Time(ctx).Result()
	require.NoError(t, err)
	assert.Equal(t, 42, v)
	assert.Equal(t, []string{"set", "set"}, h.sent(), "claim SET NX GET, complete SET IFEQ (the TIME reads around the call are not counted)")
	assert.EqualValues(t, 0, h.evalsha.Load()+h.eval.Load())

	rec, err := s.Get(ctx, sk)
	require.NoError(t, err)
	assert.Equal(t, idem.StatusCompleted, rec.Status)
	assert.Equal(t, []byte("42"), rec.Result)
	// The reading's error is at most half its round trip (100ms at most)
	// and a millisecond of rounding; on a Cluster, the test's TIME may come
	// from another master, whose clock is this machine's too.
	assert.GreaterOrEqual(t, rec.CompletedAt, before.UnixMilli()-51)
	assert.LessOrEqual(t, rec.CompletedAt, after.UnixMilli()+51)
	assert.LessOrEqual(t, rec.StartedAt, rec.CompletedAt)
	assert.EqualValues(t, idem.DefaultTTL.Milliseconds(), rec.ExpiresAt-rec.CompletedAt)
	pet, err := c.PExpireTime(ctx, s.Key(sk)).Result()
	require.NoError(t, err)
	assert.Equal(t, rec.ExpiresAt, pet.Milliseconds(), "native expiry is expires_at")
	v, err = g.Do(ctx, "order-1", func(context.Context) (int, error) { return 7, nil })
	require.NoError(t, err)
	assert.Equal(t, 42, v, "replayed")

	// The claim is gone and another caller's claim is there: nothing is
	// written, the owner is told.
	key := storageKey()
	readClock(key)
	_, err = s.Claim(ctx, claimReq(key, "n1"))
	require.NoError(t, err)
	require.True(t, s.RemembersFresh("n1"))
	require.NoError(t, s.Delete(ctx, key))
	other := newStore(t, c, redisstore.WithPrefix(s.Key("")[:len(s.Key(""))-24]))
	_, err = other.Claim(ctx, claimReq(key, "n2"))
	require.NoError(t, err)
	h.reset()
	err = s.Complete(ctx, key, "n1", idem.Completion{Status: idem.StatusCompleted, Result: []byte("1"), TTL: time.Minute})
	require.True(t, errors.Is(err, idem.ErrLostOwnership), "got %v", err)
	assert.Equal(t, []string{"set", "evalsha"}, h.sent(), "the IFEQ wrote nothing, the script told")
	rec, err = s.Get(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, idem.StatusInProgress, rec.Status)
	assert.Equal(t, "n2", rec.Nonce)

	// A watched key: the IFEQ finds the watched flag, the script completes
	// and publishes.
	key = storageKey()
	readClock(key)
	_, err = s.Claim(ctx, claimReq(key, "n3"))
	require.NoError(t, err)
	changed, stop, err := other.Watch(ctx, key)
	require.NoError(t, err)
	defer stop()
	h.reset()
	require.NoError(t, s.Complete(ctx, key, "n3", idem.Completion{Status: idem.StatusCompleted, Result: []byte("3"), TTL: time.Minute}))
	assert.Equal(t, []string{"set", "evalsha"}, h.sent(), "the IFEQ, then the script")
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("the watcher was not woken")
	}
	rec, err = s.Get(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, idem.StatusCompleted, rec.Status)
}

// TestLoadScriptsReadsClock: after LoadScripts the first fresh call on a
// server whose SET has IFEQ already completes with it (LoadScripts read
// every master's version and clock), and on Redis 7.0 with the script.
func TestLoadScriptsReadsClock(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			ctx := ctxT(t)
			c, h := counted(t, kind)
			s := newStore(t, c)
			require.NoError(t, s.LoadScripts(ctx))
			g, err := idem.New[int](s)
			require.NoError(t, err)
			want := []string{"set", "evalsha"}
			if strings.HasPrefix(kind, "valkey") {
				want = []string{"set", "set"}
			}
			for i := range 3 { // three keys: on a Cluster, on more than one master as a rule
				h.reset()
				_, err := g.Do(ctx, "first-"+strconv.Itoa(i), func(context.Context) (int, error) { return i, nil })
				require.NoError(t, err)
				assert.Equal(t, want, h.sent(), "call %d", i)
			}
		})
	}
}
