package redisfaults_test

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/redis/go-redis/v9"
)

// startCluster starts a private Cluster of 3 masters, each with one replica,
// on ports base..base+5, and waits until every replica is in sync.
func startCluster(t *testing.T, base int) []string {
	t.Helper()
	if _, err := exec.LookPath("redis-cli"); err != nil {
		testenv.Missing(t, "redis-cli binary not found")
	}
	var addrs []string
	for i := range 6 {
		s := testenv.StartRedis(t, base+i, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "1000", "--repl-diskless-sync-delay", "0")
		addrs = append(addrs, s.Addr)
	}
	out, err := exec.Command("redis-cli", append(append([]string{"--cluster", "create"}, addrs...),
		"--cluster-replicas", "1", "--cluster-yes")...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	ctx := context.Background()
	deadline := time.Now().Add(30 * time.Second)
	for _, a := range addrs {
		c := redis.NewClient(&redis.Options{Addr: a})
		for {
			info, err := c.ClusterInfo(ctx).Result()
			repl, rerr := c.Info(ctx, "replication").Result()
			if err == nil && rerr == nil && strings.Contains(info, "cluster_state:ok") &&
				(strings.Contains(repl, "role:master\r\nconnected_slaves:1") || strings.Contains(repl, "master_link_status:up")) {
				break
			}
			if time.Now().After(deadline) {
				_ = c.Close()
				t.Fatalf("cluster node %s not ready: %v %v", a, err, rerr)
			}
			time.Sleep(100 * time.Millisecond)
		}
		_ = c.Close()
	}
	return addrs
}

// TestClusterFailoverWithReplicaAck: on a Cluster with one replica per
// master, a claim acknowledged by the replica (WithReplicaAck(1, ...))
// survives CLUSTER FAILOVER FORCE on that replica: a second Guard finds the
// claim in progress and does not run fn; after the first owner's fn ends,
// nothing has run twice. (The lagging-replica half of the proof runs on
// standalone and Sentinel, where the replication stream goes through a
// proxy.)
func TestClusterFailoverWithReplicaAck(t *testing.T) {
	ctx := ctxT(t)
	addrs := startCluster(t, 7241)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, MaxRetries: 3})
	t.Cleanup(func() { _ = c.Close() })
	pfx := redisstore.WithPrefix(prefix())
	s := mustNew(t, c, pfx, redisstore.WithReplicaAck(1, 2*time.Second))
	gopts := []idem.Option{idem.WithHeartbeat(time.Hour), idem.WithTakeoverAfter(2 * time.Hour), idem.WithTTL(time.Hour)}
	// The Guards see the stores without their presence: what is proven
	// here is that the claim itself survives the failover. (A failover of
	// the shard that holds a process's presence channel ends its
	// subscription until it subscribes again on the new master; a claim
	// meeting one of its claims meanwhile takes it over, which the nonce
	// and the fencing token make safe: DESIGN rule 10b's lost session.)
	ga, err := idem.New[string](withoutPresence{s}, gopts...)
	require.NoError(t, err)

	var r runs
	block := make(chan struct{})
	started := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		fn := r.fn("k", block)
		_, err := ga.Do(ctx, "k", func(ctx context.Context) (string, error) {
			close(started)
			return fn(ctx)
		})
		done <- err
	}()
	select {
	case <-started:
	case err := <-done:
		t.Fatalf("claim failed: %v", err)
	}
	sk, err := guardinfo.StorageKey(ga, "k")
	require.NoError(t, err)
	master, err := c.MasterForKey(ctx, s.Key(sk))
	require.NoError(t, err)
	// Find the master's replica and promote it.
	var replica string
	repl, err := master.Info(ctx, "replication").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(repl, "\n") {
		if strings.HasPrefix(line, "slave0:") {
			for _, kv := range strings.Split(strings.TrimSpace(strings.TrimPrefix(line, "slave0:")), ",") {
				if p, ok := strings.CutPrefix(kv, "port="); ok {
					replica = "127.0.0.1:" + p
				}
			}
		}
	}
	require.NotEmpty(t, replica)
	rc := redis.NewClient(&redis.Options{Addr: replica})
	t.Cleanup(func() { _ = rc.Close() })
	require.NoError(t, rc.Do(ctx, "CLUSTER", "FAILOVER", "FORCE").Err())
	deadline := time.Now().Add(20 * time.Second)
	for {
		role, err := rc.Do(ctx, "ROLE").Slice()
		if err == nil && len(role) > 0 && role[0] == "master" {
			break
		}
		require.True(t, time.Now().Before(deadline), "replica %s never became master", replica)
		time.Sleep(50 * time.Millisecond)
	}
	c.ReloadState(ctx)
	time.Sleep(200 * time.Millisecond) // ReloadState is lazy
	// A second Guard, its own client, no acks (said explicitly: the
	// Cluster has replicas), finds the claim.
	c2 := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{replica}})
	t.Cleanup(func() { _ = c2.Close() })
	gb, err := idem.New[string](withoutPresence{mustNew(t, c2, pfx, redisstore.AcceptAsyncReplication())}, gopts...)
	require.NoError(t, err)
	_, err = gb.Do(ctx, "k", r.fn("k", nil))
	assert.ErrorIs(t, err, idem.ErrInProgress, "the acknowledged claim survived the failover")
	m2, err := c2.MasterForKey(ctx, s.Key(sk))
	require.NoError(t, err)
	assert.Equal(t, replica, m2.Options().Addr)
	assert.NotEqual(t, master.Options().Addr, m2.Options().Addr)
	close(block)
	<-done
	assert.Equal(t, []int64{1}, r.of("k"), "fn ran once")
}

// withoutPresence is a store whose Guards send no owner: its claims are
// taken over only after the takeover threshold.
type withoutPresence struct{ storekit.Store }
