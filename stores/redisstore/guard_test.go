package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// counted returns a fresh client of the same kind as c with a counting hook.
// counted returns a client of kind with a counter hook.
func counted(t *testing.T, kind string) (backend, *counter) {
	t.Helper()
	c := dial(t, kind)
	h := &counter{}
	c.AddHook(h)
	return c, h
}

// bothKinds runs f for each kind of deployment.
func bothKinds(t *testing.T, f func(t *testing.T, kind string)) {
	for _, k := range kinds {
		t.Run(k, func(t *testing.T) { f(t, k) })
	}
}

// TestRoundTrips proves the physical minimum: one round trip per store
// call, a fresh Do = 2 (claim, complete), a replay = 1.
func TestRoundTrips(t *testing.T) {
	bothKinds(t, func(t *testing.T, kind string) {
		ctx := ctxT(t)
		c, h := counted(t, kind)
		s := newStore(t, c)
		require.NoError(t, s.LoadScripts(ctx))

		// Store level: each operation is one round trip: a claim of an
		// absent key one transaction of native commands, the others one
		// EVALSHA.
		key := storageKey()
		for _, op := range []struct {
			name    string
			evalsha int
			f       func() error
		}{
			{"claim", 0, func() error { _, err := s.Claim(ctx, claimReq(key, "n")); return err }},
			{"heartbeat", 1, func() error { return s.Heartbeat(ctx, key, "n", time.Second) }},
			{"get", 1, func() error { _, err := s.Get(ctx, key); return err }},
		} {
			h.reset()
			require.NoError(t, op.f(), op.name)
			assert.EqualValues(t, 1, h.trips.Load(), op.name)
			assert.EqualValues(t, op.evalsha, h.evalsha.Load(), op.name)
		}
		h.reset()
		require.NoError(t, s.Complete(ctx, key, "n", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Minute}))
		require.NoError(t, s.Delete(ctx, key))
		_, err := s.Claim(ctx, claimReq(key, "m"))
		require.NoError(t, err)
		require.NoError(t, s.Release(ctx, key, "m"))
		assert.EqualValues(t, 4, h.trips.Load())
		assert.EqualValues(t, 3, h.evalsha.Load(), "complete, delete, release")

		// Guard level.
		g, err := idem.New[int](s, idem.WithHeartbeat(5*time.Second), idem.WithTakeoverAfter(30*time.Second))
		require.NoError(t, err)
		runs := 0
		fn := func(ctx context.Context) (int, error) {
			runs++
			tok, ok := idem.FencingToken(ctx)
			assert.True(t, ok)
			assert.EqualValues(t, 1, tok)
			return 42, nil
		}
		h.reset()
		v, err := g.Do(ctx, "order-1", fn)
		require.NoError(t, err)
		assert.Equal(t, 42, v)
		assert.EqualValues(t, 2, h.trips.Load(), "fresh call")
		h.reset()
		v, err = g.Do(ctx, "order-1", fn)
		require.NoError(t, err)
		assert.Equal(t, 42, v)
		assert.EqualValues(t, 1, h.trips.Load(), "replay")
		assert.Equal(t, 1, runs)
		assert.Zero(t, h.eval.Load(), "scripts were cached: no EVAL fallback")
	})
}

// TestScriptCacheFlushed shows that a server without the scripts cached
// (restart, SCRIPT FLUSH) costs one extra round trip, not a failure.
func TestScriptCacheFlushed(t *testing.T) {
	ctx := ctxT(t)
	c, h := counted(t, "standalone")
	s := newStore(t, c)
	key := storageKey()
	_, err := s.Claim(ctx, claimReq(key, "n"))
	require.NoError(t, err)
	require.NoError(t, c.ScriptFlush(ctx).Err())
	h.reset()
	require.NoError(t, s.Complete(ctx, key, "n", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Minute}))
	assert.EqualValues(t, 1, h.evalsha.Load())
	assert.EqualValues(t, 1, h.eval.Load())
}

// TestWaitWokenByPublish: a waiter in another "process" (its own client,
// store and Guard) is woken by the publish of the completing script, not
// by a poll: while it waits it sends nothing, and its safety poll is far
// longer than the wait.
func TestWaitWokenByPublish(t *testing.T) {
	bothKinds(t, func(t *testing.T, kind string) {
		ctx := ctxT(t)
		prefix := redisstore.WithPrefix(prefix())
		ca, _ := counted(t, kind)
		cb, hb := counted(t, kind)
		sa := mustNew(t, ca, prefix)
		sb := mustNew(t, cb, prefix)
		t.Cleanup(func() { _ = sa.Close(); _ = sb.Close() })
		require.NoError(t, sa.LoadScripts(ctx))
		// Takeover 1 minute: the waiter's safety poll is 2.5-5s.
		opts := []idem.Option{idem.WithHeartbeat(20 * time.Second), idem.WithTakeoverAfter(time.Minute), idem.OnDuplicate(idem.Wait)}
		ga, err := idem.New[string](sa, opts...)
		require.NoError(t, err)
		gb, err := idem.New[string](sb, opts...)
		require.NoError(t, err)

		started, release := make(chan struct{}), make(chan struct{})
		aDone := make(chan error, 1)
		go func() {
			_, err := ga.Do(ctx, "k", func(ctx context.Context) (string, error) {
				close(started)
				<-release
				return "done", nil
			})
			aDone <- err
		}()
		<-started

		hb.reset()
		bDone := make(chan struct{})
		var got string
		var gotErr error
		go func() {
			defer close(bDone)
			got, gotErr = gb.Do(ctx, "k", func(ctx context.Context) (string, error) {
				t.Error("waiter ran fn")
				return "", nil
			})
		}()
		// The waiter claims (SET NX GET finds another caller's claim, so the
		// claim script decides its staleness: 2 round trips), subscribes,
		// marks the record watched (1), claims again (2) and then sends
		// nothing until it is woken.
		require.Eventually(t, func() bool { return hb.trips.Load() >= 5 }, 5*time.Second, time.Millisecond)
		time.Sleep(300 * time.Millisecond)
		assert.EqualValues(t, 5, hb.trips.Load(), "the waiter does not poll: %v", hb.sent())

		woke := time.Now()
		close(release)
		require.NoError(t, <-aDone)
		select {
		case <-bDone:
		case <-time.After(10 * time.Second):
			t.Fatal("waiter not woken")
		}
		lat := time.Since(woke)
		require.NoError(t, gotErr)
		assert.Equal(t, "done", got)
		assert.EqualValues(t, 6, hb.trips.Load(), "woken by the publish, then one claim (a SET NX GET) that finds the result: %v", hb.sent())
		assert.Less(t, lat, 2500*time.Millisecond, "woken before the earliest safety poll")
		t.Logf("wake-up latency %v", lat)
	})
}

// TestWatchUnrelatedKeyAndClose: a publish for one key does not wake the
// watcher of another; Close wakes every watcher and later watches fail.
func TestWatchUnrelatedKeyAndClose(t *testing.T) {
	both(t, func(t *testing.T, c backend) {
		ctx := ctxT(t)
		s := newStore(t, c)
		k1, k2 := storageKey(), storageKey()
		for _, k := range []string{k1, k2} {
			_, err := s.Claim(ctx, claimReq(k, "n"))
			require.NoError(t, err)
		}
		ch1, stop1, err := s.Watch(ctx, k1)
		require.NoError(t, err)
		defer stop1()
		ch2, stop2, err := s.Watch(ctx, k2)
		require.NoError(t, err)
		defer stop2()
		// Two watchers of one key share the subscription; both wake.
		ch2b, stop2b, err := s.Watch(ctx, k2)
		require.NoError(t, err)
		defer stop2b()
		require.NoError(t, s.Release(ctx, k2, "n"))
		<-ch2
		<-ch2b
		select {
		case <-ch1:
			t.Fatal("watcher of k1 woken by k2")
		case <-time.After(50 * time.Millisecond):
		}
		// A delete wakes too.
		require.NoError(t, s.Delete(ctx, k1))
		<-ch1

		ch3, _, err := s.Watch(ctx, k1)
		require.NoError(t, err)
		require.NoError(t, s.Close())
		<-ch3
		_, _, err = s.Watch(ctx, k1)
		assert.ErrorIs(t, err, redisstore.ErrClosed)
	})
}

// TestWatchAfterPubSubKill: when the server drops the subscription
// connection, watchers are woken (a change may have been missed) and new
// watches work again once go-redis has resubscribed.
func TestWatchAfterPubSubKill(t *testing.T) {
	ctx := ctxT(t)
	c := standalone(t)
	s := newStore(t, c, redisstore.WithHealthInterval(100*time.Millisecond))
	k := storageKey()
	_, err := s.Claim(ctx, claimReq(k, "n"))
	require.NoError(t, err)
	ch, stop, err := s.Watch(ctx, k)
	require.NoError(t, err)
	defer stop()
	require.NoError(t, c.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub").Err())
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("watcher not woken after its connection was killed")
	}
	var ch2 <-chan struct{}
	require.Eventually(t, func() bool {
		var err error
		ch2, _, err = s.Watch(ctx, k)
		return err == nil
	}, 5*time.Second, 20*time.Millisecond)
	require.NoError(t, s.Complete(ctx, k, "n", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Minute}))
	select {
	case <-ch2:
	case <-time.After(5 * time.Second):
		t.Fatal("watch after resubscription not woken")
	}
}

// TestRing: a Ring publishes on the key's shard, and the store listens on
// every shard it needs.
func TestRing(t *testing.T) {
	ctx := ctxT(t)
	shards := map[string]string{"a": testenv.RedisAddr(t), "b": testenv.StartRedis(t, 7202).Addr}
	ring := redis.NewRing(&redis.RingOptions{Addrs: shards})
	defer ring.Close()
	s := newStore(t, ring)
	for range 20 {
		k := storageKey()
		_, err := s.Claim(ctx, claimReq(k, "n"))
		require.NoError(t, err)
		ch, stop, err := s.Watch(ctx, k)
		require.NoError(t, err)
		require.NoError(t, s.Complete(ctx, k, "n", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Minute}))
		<-ch
		stop()
	}
}
