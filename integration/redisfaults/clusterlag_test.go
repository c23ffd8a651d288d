package redisfaults_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/redis/go-redis/v9"
)

// lagCluster is a private Cluster of three masters where the first master,
// which owns almost every slot, has one replica that replicates through a
// proxy: the master announces the proxy's port, while the test's clients
// are given the real addresses (ClusterOptions.ClusterSlots). base..base+3
// are the ports: master, replica, two more masters (their votes let the
// replica take over with CLUSTER FAILOVER FORCE).
func lagCluster(t *testing.T, sv server, base int) deployment {
	t.Helper()
	mport, rport := base, base+1
	proxy := newFaultProxy(t, "127.0.0.1:"+strconv.Itoa(mport))
	_, pport, _ := strings.Cut(proxy.addr(), ":")
	cl := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "1000", "--repl-diskless-sync-delay", "0"}
	m := sv.start(t, mport, append(cl, "--cluster-announce-port", pport, "--cluster-announce-bus-port", strconv.Itoa(mport+10000))...)
	r := sv.start(t, rport, cl...)
	n2 := sv.start(t, base+2, cl...)
	n3 := sv.start(t, base+3, cl...)
	cli := func(s *testenv.RedisServer) *redis.Client {
		c := redis.NewClient(&redis.Options{Addr: s.Addr})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	mc, rc, c2, c3 := cli(m), cli(r), cli(n2), cli(n3)
	joinLagCluster(t, mc, rc, c2, c3, mport)
	topo := func(first string) func(context.Context) ([]redis.ClusterSlot, error) {
		return lagTopology(first, n2.Addr, n3.Addr)
	}
	rs := &replicated{master: m, replica: r, proxy: proxy}
	return deployment{rs: rs,
		before: func(t *testing.T) redisstore.Client {
			c := redis.NewClusterClient(&redis.ClusterOptions{ClusterSlots: topo(m.Addr), MaxRetries: -1})
			t.Cleanup(func() { _ = c.Close() })
			return c
		},
		failover: func(t *testing.T) {
			m.Stop()
			forceFailover(t, rc)
		},
		after: func(t *testing.T) redisstore.Client {
			c := redis.NewClusterClient(&redis.ClusterOptions{ClusterSlots: topo(r.Addr)})
			t.Cleanup(func() { _ = c.Close() })
			return c
		},
	}
}

// joinLagCluster gives the master mc slots 0..16381 and c2 and c3 one slot
// each, has rc replicate mc, and waits until the replica has caught up and
// the cluster is ok.
func joinLagCluster(t *testing.T, mc, rc, c2, c3 *redis.Client, mport int) {
	t.Helper()
	ctx := context.Background()
	require.NoError(t, mc.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 0, 16381).Err())
	require.NoError(t, c2.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 16382, 16382).Err())
	require.NoError(t, c3.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", 16383, 16383).Err())
	for _, c := range []*redis.Client{rc, c2, c3} {
		require.NoError(t, c.ClusterMeet(ctx, "127.0.0.1", strconv.Itoa(mport)).Err())
	}
	mid, err := mc.Do(ctx, "CLUSTER", "MYID").Text()
	require.NoError(t, err)
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := rc.Do(ctx, "CLUSTER", "REPLICATE", mid).Err()
		if err == nil {
			break
		}
		require.True(t, time.Now().Before(deadline), "replicate: %v", err)
		time.Sleep(100 * time.Millisecond)
	}
	for {
		n, err := mc.Do(ctx, "WAIT", 1, 100).Int64()
		info, _ := mc.ClusterInfo(ctx).Result()
		if err == nil && n == 1 && strings.Contains(info, "cluster_state:ok") {
			break
		}
		_ = mc.Set(ctx, "{x}sync", "1", 0).Err()
		require.True(t, time.Now().Before(deadline), "cluster not ready: %v %d %s", err, n, info)
		time.Sleep(100 * time.Millisecond)
	}
}

// lagTopology is the slot map given to the test's clients: the first
// master's slots at first, whatever port it announces.
func lagTopology(first, n2, n3 string) func(context.Context) ([]redis.ClusterSlot, error) {
	return func(context.Context) ([]redis.ClusterSlot, error) {
		return []redis.ClusterSlot{
			{Start: 0, End: 16381, Nodes: []redis.ClusterNode{{Addr: first}}},
			{Start: 16382, End: 16382, Nodes: []redis.ClusterNode{{Addr: n2}}},
			{Start: 16383, End: 16383, Nodes: []redis.ClusterNode{{Addr: n3}}},
		}, nil
	}
}

// forceFailover has the replica rc take over with CLUSTER FAILOVER FORCE
// and waits until it is a master of an ok cluster.
func forceFailover(t *testing.T, rc *redis.Client) {
	ctx := context.Background()
	require.NoError(t, rc.Do(ctx, "CLUSTER", "FAILOVER", "FORCE").Err())
	deadline := time.Now().Add(20 * time.Second)
	for {
		role, err := rc.Do(ctx, "ROLE").Slice()
		info, _ := rc.ClusterInfo(ctx).Result()
		if err == nil && len(role) > 0 && role[0] == "master" && strings.Contains(info, "cluster_state:ok") {
			return
		}
		require.True(t, time.Now().Before(deadline), "replica never took over: %v %v", err, role)
		time.Sleep(50 * time.Millisecond)
	}
}

// TestClusterFailoverWithoutReplicaAckDuplicates: on a Cluster, a claim the
// lagging replica never received is lost by CLUSTER FAILOVER FORCE and fn
// runs twice with fencing token 1.
func TestClusterFailoverWithoutReplicaAckDuplicates(t *testing.T) {
	for _, sv := range servers(7261, 7251) {
		t.Run(sv.name, func(t *testing.T) {
			d := lagCluster(t, sv, sv.port)
			assertDefaultRefuses(t, d)
			r, lagErr := failoverScenario(t, d, redisstore.AcceptAsyncReplication())
			assertUnsafeDuplicates(t, r, lagErr)
		})
	}
}

// TestClusterLagFailoverWithReplicaAck: with WithReplicaAck the lagging
// claim fails cleanly and fn runs once across CLUSTER FAILOVER FORCE.
func TestClusterLagFailoverWithReplicaAck(t *testing.T) {
	for _, sv := range servers(7271, 7255) {
		t.Run(sv.name, func(t *testing.T) {
			r, lagErr := failoverScenario(t, lagCluster(t, sv, sv.port), redisstore.WithReplicaAck(1, ackWait))
			assertAckedOnce(t, r, lagErr)
		})
	}
}
