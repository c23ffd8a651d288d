package redisisr_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/isrtest"
	"github.com/idem-go/idem/isr/redisisr"
	"github.com/idem-go/idem/stores/storetest"
)

func redisClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func redisCluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisClusterAddrs(t)})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// redisPrefix returns a fresh key prefix and deletes its keys when the
// test ends.
func redisPrefix(t testing.TB, c redis.UniversalClient) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	prefix := "isrtest:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		del := func(ctx context.Context, c redis.UniversalClient) error {
			iter := c.Scan(ctx, 0, prefix+"*", 20000).Iterator()
			for iter.Next(ctx) {
				c.Del(ctx, iter.Val())
			}
			return iter.Err()
		}
		if cc, ok := c.(*redis.ClusterClient); ok {
			_ = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return del(ctx, n) })
			return
		}
		_ = del(ctx, c)
	})
	return prefix
}

func newRedisTable(t testing.TB, c redis.UniversalClient) *redisisr.Table {
	t.Helper()
	tb, err := redisisr.NewTable(c, redisisr.WithPrefix(redisPrefix(t, c)))
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// The suite's tables share one prefix (and one clean-up scan); each
// subtest works on fresh random partition keys.
func TestRedisTableConformance(t *testing.T) {
	tb := newRedisTable(t, redisClient(t))
	isrtest.Run(t, func(t *testing.T) isr.Table { return tb })
}

func TestRedisClusterTableConformance(t *testing.T) {
	tb := newRedisTable(t, redisCluster(t))
	isrtest.Run(t, func(t *testing.T) isr.Table { return tb })
}

func TestNewTableOptions(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	defer c.Close()
	for i, f := range []func() (*redisisr.Table, error){
		func() (*redisisr.Table, error) { return redisisr.NewTable(nil) },
		func() (*redisisr.Table, error) { return redisisr.NewTable(c, nil) },
		func() (*redisisr.Table, error) { return redisisr.NewTable(c, redisisr.WithPrefix("a{b}:")) },
	} {
		tb, err := f()
		if tb != nil || !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("case %d: %v, %v", i, tb, err)
		}
	}
	tb, err := redisisr.NewTable(nil, redisisr.WithPrefix("{"), nil)
	storetest.CheckOptionErrors(t, err, "redisisr.NewTable", "redisisr.WithPrefix", "redisisr.NewTable")
	if tb != nil {
		t.Errorf("got %v, want nil", tb)
	}
	tb, err = redisisr.NewTable(c, redisisr.WithPrefix("site1:"))
	if err != nil || tb.Key("CACHE#ab", isr.SKMeta) != "site1:{CACHE#ab}:META" {
		t.Fatalf("NewTable: %v, %v", tb, err)
	}
}
