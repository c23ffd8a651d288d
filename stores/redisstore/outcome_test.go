package redisstore_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/internal/testenv"
)

// A completion Redis applied whose reply was lost (a client with
// ContextTimeoutEnabled gives up at the deadline): the Guard reads the
// record back, finds its own outcome, and tells the caller it was recorded.
// (Before: ErrNotRecorded, while the record held the result.)
func TestCompletionReplyLostIsReadBack(t *testing.T) {
	proxy := testenv.NewProxy(t, testenv.RedisAddr(t))
	c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), ContextTimeoutEnabled: true, PoolSize: 2})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		testenv.Missing(t, "redis ping: "+err.Error())
	}
	s := newStore(t, c)
	testenv.CheckCompletionReadBack(t, s, proxy)
}
