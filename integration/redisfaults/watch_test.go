package redisfaults_test

import (
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/stores/redisstore"
	"github.com/redis/go-redis/v9"
)

// TestWatchSilentlyDeadConnection: a subscription connection that stops
// answering without closing (a black-holed network path) is found by the
// health check: its watchers are woken, and watches work again once the
// network is back.
func TestWatchSilentlyDeadConnection(t *testing.T) {
	ctx := ctxT(t)
	up := standalone(t)
	fp := newFaultProxy(t, up.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: fp.addr(), DialTimeout: 300 * time.Millisecond,
		ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { _ = c.Close() })
	pfx := redisstore.WithPrefix(prefix())
	s := mustNew(t, c, pfx, redisstore.WithHealthInterval(100*time.Millisecond),
		redisstore.WithWatchTimeout(300*time.Millisecond))
	t.Cleanup(func() { _ = s.Close() })
	direct := newStore(t, up, pfx)

	k := storageKey()
	_, err := direct.Claim(ctx, claimReq(k, "n"))
	require.NoError(t, err)
	ch, stop, err := s.Watch(ctx, k)
	require.NoError(t, err)
	defer stop()

	fp.add("hole_up", "timeout", "upstream", map[string]any{"timeout": 0})
	fp.add("hole_down", "timeout", "downstream", map[string]any{"timeout": 0})
	select {
	case <-ch:
	case <-time.After(3 * time.Second):
		t.Fatal("watcher not woken although its connection stopped answering")
	}
	fp.remove("hole_up")
	fp.remove("hole_down")

	var ch2 <-chan struct{}
	require.Eventually(t, func() bool {
		var stop2 func()
		ch2, stop2, err = s.Watch(ctx, k)
		if err == nil {
			t.Cleanup(stop2)
		}
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "watch never works again")
	require.NoError(t, direct.Complete(ctx, k, "n", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Minute}))
	select {
	case <-ch2:
	case <-time.After(5 * time.Second):
		t.Fatal("watch after the network came back not woken")
	}
}
