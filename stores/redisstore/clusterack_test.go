package redisstore_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/redis/go-redis/v9"
)

// waitRecorder records the node address of every pipeline that carries a
// WAIT, and the keys of the scripts in it.
type waitRecorder struct {
	addr string
	mu   *sync.Mutex
	seen map[string][]string // key -> node addresses its WAITs went to
}

func (w waitRecorder) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (w waitRecorder) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (w waitRecorder) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		var key string
		wait := false
		for _, c := range cmds {
			switch c.Name() {
			case "evalsha", "eval":
				if s, ok := c.Args()[3].(string); ok {
					key = s
				}
			case "set":
				if s, ok := c.Args()[1].(string); ok {
					key = s
				}
			case "wait":
				wait = true
			}
		}
		if wait {
			w.mu.Lock()
			w.seen[key] = append(w.seen[key], w.addr)
			w.mu.Unlock()
		}
		return next(ctx, cmds)
	}
}

// TestReplicaAckWaitGoesToTheKeysMaster: on a Cluster, the WAIT pipelined
// with a claim and a complete runs on the master that owns the key's slot
// (a ClusterClient pipeline would send the keyless WAIT to a random node).
// The shared Cluster has no replicas, so every claim fails with 0 of 1
// replicas and is released.
func TestReplicaAckWaitGoesToTheKeysMaster(t *testing.T) {
	ctx := ctxT(t)
	rec := waitRecorder{mu: &sync.Mutex{}, seen: map[string][]string{}}
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisClusterAddrs(t)})
	c.OnNewNode(func(n *redis.Client) {
		r := rec
		r.addr = n.Options().Addr
		n.AddHook(r)
	})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(ctx).Err(); err != nil {
		testenv.Missing(t, "redis cluster ping: "+err.Error())
	}
	s := newStore(t, c, redisstore.WithReplicaAck(1, 5*time.Millisecond))
	const n = 24
	for i := range n {
		key := storageKey()
		_, err := s.Claim(ctx, claimReq(key, "n"))
		var ae *redisstore.ReplicaAckError
		require.True(t, errors.As(err, &ae), "%v", err)
		assert.EqualValues(t, 0, ae.Got)
		_, err = s.Get(ctx, key)
		assert.ErrorIs(t, err, storekit.ErrNotFound, "the unacknowledged claim is released")
		master, err := c.MasterForKey(ctx, s.Key(key))
		require.NoError(t, err)
		rec.mu.Lock()
		got := rec.seen[s.Key(key)]
		rec.mu.Unlock()
		// A NOSCRIPT reply (the first script on a node) sends the
		// pipeline again, so a key may see two WAITs: all on its master.
		require.NotEmpty(t, got, "key %d: no WAIT", i)
		for _, addr := range got {
			assert.Equal(t, master.Options().Addr, addr, "key %d: WAIT went to another node", i)
		}
	}
}
