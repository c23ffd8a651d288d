package redisstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testenv"
)

// A completion Redis applied whose reply was lost (a client with
// ContextTimeoutEnabled gives up at the deadline): the Guard reads the
// record back, finds its own outcome, and tells the caller it was recorded.
// (Before: ErrNotRecorded, while the record held the result.)
func TestCompletionReplyLostIsReadBack(t *testing.T) {
	proxy := testenv.NewDropProxy(t, testenv.RedisAddr(t))
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, PoolSize: 2})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		testenv.Missing(t, "redis ping: "+err.Error())
	}
	s := newStore(t, c)
	g, err := idem.New[int](s, idem.WithTakeoverAfter(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Do(context.Background(), "warm", func(ctx context.Context) (int, error) { return 0, nil }); err != nil {
		t.Fatal(err) // scripts loaded
	}
	var runs atomic.Int32
	v, err := g.Do(context.Background(), "lost", func(ctx context.Context) (int, error) {
		runs.Add(1)
		proxy.Armed.Store(true) // the completion's reply is lost
		return 7, nil
	})
	if err != nil || v != 7 {
		t.Fatalf("Do: %d, %v; want 7 and no error (the record holds the outcome)", v, err)
	}
	v, err = g.Do(context.Background(), "lost", func(ctx context.Context) (int, error) { runs.Add(1); return 8, nil })
	if err != nil || v != 7 || runs.Load() != 1 {
		t.Fatalf("replay: %d, %v, %d runs; want 7 from one run", v, err, runs.Load())
	}
}
