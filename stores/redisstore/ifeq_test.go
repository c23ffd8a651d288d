package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCompleteIfEq: a fresh call's completion is one conditional SET: on
// Valkey 8.1 the native SET ... IFEQ (no script), on Redis 7.0 the
// four-line lua/set_ifeq.lua (not the complete script). The record it
// writes is what the complete script writes, with the server's times:
// completed_at within the reading's error of the server's TIME, a native
// expiry that is its expires_at exactly. A completion whose claim is gone
// writes nothing and reports the lost ownership; one of a key a waiter
// watches falls back to the complete script, which publishes.
func TestCompleteIfEq(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) { testCompleteIfEq(t, kind) })
	}
}

func testCompleteIfEq(t *testing.T, kind string) {
	ctx := ctxT(t)
	c, h := counted(t, kind)
	s := newStore(t, c)
	require.NoError(t, s.LoadScripts(ctx))
	native := strings.HasPrefix(kind, "valkey")
	readClock := func(key string) {
		t.Helper()
		ok, err := s.ReadServerClock(ctx, key)
		require.NoError(t, err)
		require.Equal(t, native, ok, "Valkey 8.1 has SET ... IFEQ, Redis 7.0 has not")
	}
	// set is the conditional SET as the hook sees it; set+script is it,
	// then the complete script.
	set, scripts := []string{"set"}, []string(nil)
	if !native {
		set, scripts = []string{"evalsha"}, []string{redisstore.SetIfEqSHA}
	}
	then := func(a []string, b ...string) []string { return append(append([]string(nil), a...), b...) }

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
	assert.Equal(t, then([]string{"set"}, set...), h.sent(), "claim SET NX GET, complete with the conditional SET (the TIME reads around the call are not counted)")
	assert.Equal(t, scripts, h.scripts(), "no complete script")

	rec, err := s.Get(ctx, sk)
	require.NoError(t, err)
	assert.Equal(t, storekit.StatusCompleted, rec.Status)
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
	err = s.Complete(ctx, key, "n1", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("1"), TTL: time.Minute})
	require.True(t, errors.Is(err, storekit.ErrLostOwnership), "got %v", err)
	assert.Equal(t, then(set, "evalsha"), h.sent(), "the conditional SET wrote nothing, the script told")
	assert.Equal(t, then(scripts, redisstore.CompleteSHA), h.scripts())
	rec, err = s.Get(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, storekit.StatusInProgress, rec.Status)
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
	require.NoError(t, s.Complete(ctx, key, "n3", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("3"), TTL: time.Minute}))
	assert.Equal(t, then(set, "evalsha"), h.sent(), "the conditional SET, then the script")
	select {
	case <-changed:
	case <-ctx.Done():
		t.Fatal("the watcher was not woken")
	}
	rec, err = s.Get(ctx, key)
	require.NoError(t, err)
	assert.Equal(t, storekit.StatusCompleted, rec.Status)
}

// TestLoadScriptsReadsClock: after LoadScripts the first fresh call
// already completes with the conditional SET (LoadScripts read every
// master's version and clock): on Valkey 8.1 SET ... IFEQ, on Redis 7.0
// lua/set_ifeq.lua rather than the complete script.
func TestLoadScriptsReadsClock(t *testing.T) {
	for _, kind := range kinds {
		t.Run(kind, func(t *testing.T) {
			ctx := ctxT(t)
			c, h := counted(t, kind)
			s := newStore(t, c)
			require.NoError(t, s.LoadScripts(ctx))
			g, err := idem.New[int](s)
			require.NoError(t, err)
			want, scripts := []string{"set", "evalsha"}, []string{redisstore.SetIfEqSHA}
			if strings.HasPrefix(kind, "valkey") {
				want, scripts = []string{"set", "set"}, nil
			}
			for i := range 3 { // three keys: on a Cluster, on more than one master as a rule
				h.reset()
				_, err := g.Do(ctx, "first-"+strconv.Itoa(i), func(context.Context) (int, error) { return i, nil })
				require.NoError(t, err)
				assert.Equal(t, want, h.sent(), "call %d", i)
				assert.Equal(t, scripts, h.scripts(), "call %d", i)
			}
		})
	}
}
