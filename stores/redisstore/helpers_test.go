package redisstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

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

// kinds are the deployments the store's tests run on: standalone Redis
// and the Cluster, and Valkey 8.1 standalone and Cluster, whose SET has
// IFEQ (so the store completes fresh claims with it).
var kinds = []string{"standalone", "cluster", "valkey", "valkey-cluster"}

// dial returns a client of the test deployment kind, pinged (so a
// Cluster's layout is known), closed at the end of t.
func dial(t testing.TB, kind string) backend {
	t.Helper()
	var c backend
	switch kind {
	case "standalone":
		c = redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	case "cluster":
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisClusterAddrs(t)})
	case "valkey":
		c = redis.NewClient(&redis.Options{Addr: testenv.Lookup(t, "IDEM_VALKEY_ADDR", "valkey 8.1")})
	case "valkey-cluster":
		addrs := strings.Split(testenv.Lookup(t, "IDEM_VALKEY_CLUSTER", "valkey 8.1 cluster"), ",")
		c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	default:
		t.Fatalf("unknown deployment %q", kind)
	}
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		testenv.Missing(t, kind+" ping: "+err.Error())
	}
	return c
}

func standalone(t testing.TB) *redis.Client { return dial(t, "standalone").(*redis.Client) }

func cluster(t testing.TB) *redis.ClusterClient { return dial(t, "cluster").(*redis.ClusterClient) }

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

// counter is a go-redis hook counting the commands a client sends, by name,
// and the round trips (a pipeline is one).
type counter struct {
	trips    atomic.Int64
	evalsha  atomic.Int64
	eval     atomic.Int64
	commands atomic.Int64
	mu       sync.Mutex
	names    []string
	shas     []string // of the EVALSHAs, in order
}

func (c *counter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *counter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if setup(cmd) {
			return next(ctx, cmd)
		}
		c.trips.Add(1)
		c.count(cmd)
		return next(ctx, cmd)
	}
}

func (c *counter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		all := true
		for _, cmd := range cmds {
			all = all && setup(cmd)
		}
		if all {
			return next(ctx, cmds)
		}
		c.trips.Add(1)
		for _, cmd := range cmds {
			c.count(cmd)
		}
		return next(ctx, cmds)
	}
}

// setup reports whether cmd is part of setting up a connection (go-redis
// sends these through the hooks when it dials), the store's replica check
// (INFO replication, at the first claim and once a minute) or its reading
// of the server's version and clock (INFO server and TIME, in the
// background, for SET ... IFEQ), not a request.
func setup(cmd redis.Cmder) bool {
	switch strings.ToLower(cmd.Name()) {
	case "hello", "client", "auth", "select", "readonly", "info", "time":
		return true
	}
	return false
}

func (c *counter) count(cmd redis.Cmder) {
	c.commands.Add(1)
	c.mu.Lock()
	c.names = append(c.names, cmd.Name())
	c.mu.Unlock()
	switch strings.ToLower(cmd.Name()) {
	case "evalsha":
		c.evalsha.Add(1)
		if args := cmd.Args(); len(args) > 1 {
			c.mu.Lock()
			c.shas = append(c.shas, fmt.Sprint(args[1]))
			c.mu.Unlock()
		}
	case "eval":
		c.eval.Add(1)
	}
}

func (c *counter) reset() {
	c.trips.Store(0)
	c.evalsha.Store(0)
	c.eval.Store(0)
	c.commands.Store(0)
	c.mu.Lock()
	c.names, c.shas = nil, nil
	c.mu.Unlock()
}

// scripts lists the SHA1s of the EVALSHAs counted since the last reset.
func (c *counter) scripts() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.shas...)
}

// sent lists the commands counted since the last reset.
func (c *counter) sent() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.names...)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
