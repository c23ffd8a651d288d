package redisstore_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/guardinfo"
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
	k := ifEqStore{ctx: ctx, c: c, h: h, s: s, native: strings.HasPrefix(kind, "valkey")}
	// set is the conditional SET as the hook sees it; set+script is it,
	// then the complete script.
	k.set = []string{"set"}
	if !k.native {
		k.set, k.scripts = []string{"evalsha"}, []string{redisstore.SetIfEqSHA}
	}
	k.completeWritesOnce(t)
	other := k.lostClaimNotWritten(t)
	k.watchedKeyPublishes(t, other)
}

// ifEqStore is a store on a backend with or without SET ... IFEQ, and what
// its completions send.
type ifEqStore struct {
	ctx          context.Context
	c            backend
	h            *counter
	s            *redisstore.Store
	native       bool
	set, scripts []string
}

// readClock reads the server's clock for key: the conditional SET is
// native on Valkey only.
func (k ifEqStore) readClock(t *testing.T, key string) {
	t.Helper()
	ok, err := k.s.ReadServerClock(k.ctx, key)
	require.NoError(t, err)
	require.Equal(t, k.native, ok, "Valkey 8.1 has SET ... IFEQ, Redis 7.0 has not")
}

func (ifEqStore) then(a []string, b ...string) []string {
	return append(append([]string(nil), a...), b...)
}

// completeWritesOnce checks a call completes with the conditional SET only,
// recording the server's time and expiry, and is replayed.
func (k ifEqStore) completeWritesOnce(t *testing.T) {
	g, err := idem.New[int](k.s)
	require.NoError(t, err)
	sk, err := guardinfo.StorageKey(g, "order-1")
	require.NoError(t, err)
	k.readClock(t, sk)
	k.h.reset()
	before, err := k.c.Time(k.ctx).Result()
	require.NoError(t, err)
	v, err := g.Do(k.ctx, "order-1", func(context.Context) (int, error) { return 42, nil })
	require.NoError(t, err)
	after, err := k.c.Time(k.ctx).Result()
	require.NoError(t, err)
	assert.Equal(t, 42, v)
	assert.Equal(t, k.then([]string{"set"}, k.set...), k.h.sent(), "claim SET NX GET, complete with the conditional SET (the TIME reads around the call are not counted)")
	assert.Equal(t, k.scripts, k.h.scripts(), "no complete script")

	rec, err := k.s.Get(k.ctx, sk)
	require.NoError(t, err)
	assert.Equal(t, storekit.StatusCompleted, rec.Status)
	assert.Equal(t, []byte("42"), rec.Result)
	// The reading's error is at most half its round trip (100ms at most)
	// and a millisecond of rounding; on a Cluster, the test's TIME may come
	// from another master, whose clock is this machine's too.
	assert.GreaterOrEqual(t, rec.CompletedAt, before.UnixMilli()-51)
	assert.LessOrEqual(t, rec.CompletedAt, after.UnixMilli()+51)
	assert.LessOrEqual(t, rec.StartedAt, rec.CompletedAt)
	assert.EqualValues(t, (24 * time.Hour).Milliseconds(), rec.ExpiresAt-rec.CompletedAt)
	pet, err := k.c.PExpireTime(k.ctx, k.s.Key(sk)).Result()
	require.NoError(t, err)
	assert.Equal(t, rec.ExpiresAt, pet.Milliseconds(), "native expiry is expires_at")
	v, err = g.Do(k.ctx, "order-1", func(context.Context) (int, error) { return 7, nil })
	require.NoError(t, err)
	assert.Equal(t, 42, v, "replayed")
}

// lostClaimNotWritten checks a completion of a claim deleted and claimed
// by another store writes nothing and is ErrLostOwnership, and returns
// that other store.
func (k ifEqStore) lostClaimNotWritten(t *testing.T) *redisstore.Store {
	// The claim is gone and another caller's claim is there: nothing is
	// written, the owner is told.
	key := storageKey()
	k.readClock(t, key)
	_, err := k.s.Claim(k.ctx, claimReq(key, "n1"))
	require.NoError(t, err)
	require.True(t, k.s.RemembersFresh("n1"))
	require.NoError(t, k.s.Delete(k.ctx, key))
	other := newStore(t, k.c, redisstore.WithPrefix(k.s.Key("")[:len(k.s.Key(""))-24]))
	_, err = other.Claim(k.ctx, claimReq(key, "n2"))
	require.NoError(t, err)
	k.h.reset()
	err = k.s.Complete(k.ctx, key, "n1", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("1"), TTL: time.Minute})
	require.True(t, errors.Is(err, storekit.ErrLostOwnership), "got %v", err)
	assert.Equal(t, k.then(k.set, "evalsha"), k.h.sent(), "the conditional SET wrote nothing, the script told")
	assert.Equal(t, k.then(k.scripts, redisstore.CompleteSHA), k.h.scripts())
	rec, err := k.s.Get(k.ctx, key)
	require.NoError(t, err)
	assert.Equal(t, storekit.StatusInProgress, rec.Status)
	assert.Equal(t, "n2", rec.Nonce)
	return other
}

// watchedKeyPublishes checks a completion of a key other watches falls
// back to the complete script, which publishes.
func (k ifEqStore) watchedKeyPublishes(t *testing.T, other *redisstore.Store) {
	// A watched key: the IFEQ finds the watched flag, the script completes
	// and publishes.
	key := storageKey()
	k.readClock(t, key)
	_, err := k.s.Claim(k.ctx, claimReq(key, "n3"))
	require.NoError(t, err)
	changed, stop, err := other.Watch(k.ctx, key)
	require.NoError(t, err)
	defer stop()
	k.h.reset()
	require.NoError(t, k.s.Complete(k.ctx, key, "n3", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("3"), TTL: time.Minute}))
	assert.Equal(t, k.then(k.set, "evalsha"), k.h.sent(), "the conditional SET, then the script")
	select {
	case <-changed:
	case <-k.ctx.Done():
		t.Fatal("the watcher was not woken")
	}
	rec, err := k.s.Get(k.ctx, key)
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
