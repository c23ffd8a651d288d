package redisfaults_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/idem-go/idem/stores/storetest/testenv"
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

func claimReq(key, nonce string) idem.ClaimRequest {
	return idem.ClaimRequest{Key: key, Nonce: nonce, LeaseTTL: 10 * time.Second, TakeoverAfter: 5 * time.Second}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
