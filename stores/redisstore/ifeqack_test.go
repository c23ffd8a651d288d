package redisstore_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCompleteIfEqReplicaAck: with WithReplicaAck on Valkey 8.1 the
// conditional completion is pipelined with WAIT (one round trip, no
// script); a replica that does not acknowledge it (stopped while fn runs)
// makes the outcome not recorded (ErrNotReplicated), as with the script.
func TestCompleteIfEqReplicaAck(t *testing.T) {
	if testing.Short() {
		t.Skip("starts servers")
	}
	ctx := ctxT(t)
	testenv.StartValkey(t, 7321)
	replica := testenv.StartValkey(t, 7322, "--replicaof", "127.0.0.1", "7321")
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:7321"})
	t.Cleanup(func() { _ = c.Close() })
	require.Eventually(t, func() bool {
		info, err := c.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:1") && strings.Contains(info, ",state=online,")
	}, 10*time.Second, 50*time.Millisecond, "the replica is online")
	h := &counter{}
	c.AddHook(h)
	s := newStore(t, c, redisstore.WithReplicaAck(1, 2*time.Second))
	require.NoError(t, s.LoadScripts(ctx))
	g, err := idem.New[int](s)
	require.NoError(t, err)
	for _, k := range []string{"order-1", "order-2"} {
		sk, err := guardinfo.StorageKey(g, k)
		require.NoError(t, err)
		ok, err := s.ReadServerClock(ctx, sk)
		require.NoError(t, err)
		require.True(t, ok)
	}

	h.reset()
	v, err := g.Do(ctx, "order-1", func(context.Context) (int, error) { return 1, nil })
	require.NoError(t, err)
	assert.Equal(t, 1, v)
	assert.Equal(t, []string{"set", "wait", "set", "wait"}, h.sent(), "claim SET NX GET + WAIT, complete SET IFEQ + WAIT")
	assert.EqualValues(t, 2, h.trips.Load())

	h.reset()
	v, err = g.Do(ctx, "order-2", func(context.Context) (int, error) {
		require.NoError(t, replica.Signal(syscall.SIGSTOP))
		return 2, nil
	})
	require.NoError(t, replica.Signal(syscall.SIGCONT))
	assert.Equal(t, 2, v)
	assert.True(t, errors.Is(err, storekit.ErrNotRecorded), "got %v", err)
	assert.True(t, errors.Is(err, redisstore.ErrNotReplicated), "got %v", err)
	assert.Equal(t, []string{"set", "wait", "set", "wait"}, h.sent(), "the completion was the SET IFEQ, unacknowledged")
}
