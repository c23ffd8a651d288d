package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// failSubscribe makes the next write of a SUBSCRIBE fail, as on a
// connection that died while the receive loop had not noticed yet.
type failSubscribe struct{ armed atomic.Bool }

type failSubscribeConn struct {
	net.Conn
	f *failSubscribe
}

func (c *failSubscribeConn) Write(b []byte) (int, error) {
	if bytes.Contains(bytes.ToLower(b), []byte("subscribe")) && c.f.armed.CompareAndSwap(true, false) {
		return 0, errors.New("injected write failure")
	}
	return c.Conn.Write(b)
}

func (f *failSubscribe) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	cn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &failSubscribeConn{Conn: cn, f: f}, nil
}

// TestWatchAfterSubscribeWriteFails: when the SUBSCRIBE of a new channel
// fails to write, go-redis reconnects and resubscribes the channels it had
// before; the new channel must still end up subscribed, so later watches of
// that key work instead of timing out until the next reconnect.
func TestWatchAfterSubscribeWriteFails(t *testing.T) {
	ctx := ctxT(t)
	f := &failSubscribe{}
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t), Dialer: f.dial})
	t.Cleanup(func() { _ = c.Close() })
	s := newStore(t, c, redisstore.WithWatchTimeout(500*time.Millisecond))
	k1, k2 := storageKey(), storageKey()
	for _, k := range []string{k1, k2} {
		_, err := s.Claim(ctx, claimReq(k, "n"))
		require.NoError(t, err)
	}
	_, stop1, err := s.Watch(ctx, k1)
	require.NoError(t, err)
	defer stop1()

	f.armed.Store(true)
	if _, stop, err := s.Watch(ctx, k2); err == nil {
		stop()
	}
	require.False(t, f.armed.Load(), "the SUBSCRIBE write was not attempted")

	var ch <-chan struct{}
	require.Eventually(t, func() bool {
		var stop func()
		ch, stop, err = s.Watch(ctx, k2)
		if err == nil {
			t.Cleanup(stop)
		}
		return err == nil
	}, 3*time.Second, 10*time.Millisecond, "watch of k2 keeps failing")
	require.NoError(t, s.Complete(ctx, k2, "n", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Minute}))
	select {
	case <-ch:
	case <-time.After(5 * time.Second):
		t.Fatal("watcher of k2 not woken by its completion")
	}
}
