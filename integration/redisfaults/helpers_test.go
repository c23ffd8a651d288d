package redisfaults_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/redis/go-redis/v9"
)

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// storageKey returns a key shaped like the ones a Guard passes.
func storageKey() string { return "idem:" + randHex(32) }

func prefix() string { return "t" + randHex(6) + ":" }

func standalone(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		testenv.Missing(t, "redis ping: "+err.Error())
	}
	return c
}

// newStore returns a store with a fresh prefix, closed at the end of t.
func newStore(t testing.TB, c redisstore.Client, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s := mustNew(t, c, append([]redisstore.Option{redisstore.WithPrefix(prefix())}, opts...)...)
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// mustNew is redisstore.New that fails t on an error.
func mustNew(t testing.TB, c redisstore.Client, opts ...redisstore.Option) *redisstore.Store {
	t.Helper()
	s, err := redisstore.New(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func claimReq(key, nonce string) storekit.ClaimRequest {
	return storekit.ClaimRequest{Key: key, Nonce: nonce, LeaseTTL: 10 * time.Second, TakeoverAfter: 5 * time.Second}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// commands records the names of the commands a client sent, leaving out
// those of setting up a connection and the store's background reads
// (INFO, TIME, ROLE and the like).
type commands struct {
	mu    sync.Mutex
	names []string
}

func (c *commands) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commands) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(cmd)
		return next(ctx, cmd)
	}
}

func (c *commands) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			c.add(cmd)
		}
		return next(ctx, cmds)
	}
}

func (c *commands) add(cmd redis.Cmder) {
	switch cmd.Name() {
	case "hello", "client", "auth", "select", "ping", "info", "time", "role", "config", "script":
		return
	}
	c.mu.Lock()
	c.names = append(c.names, cmd.Name())
	c.mu.Unlock()
}

func (c *commands) reset() {
	c.mu.Lock()
	c.names = nil
	c.mu.Unlock()
}

func (c *commands) sent() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.names...)
}
