package redisfaults_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/stores/redisstore"
	"github.com/redis/go-redis/v9"
)

// startSentinel starts one Sentinel (quorum 1, down after 500ms) on port
// watching the master of rs as "m": the server binary of rs's kind
// (redis-server or valkey-server) run with --sentinel, which is what the
// Debian redis-sentinel and valkey-sentinel packages run.
func startSentinel(t *testing.T, port int, rs *replicated) string {
	t.Helper()
	dir := rs.master.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	require.NoError(t, os.WriteFile(conf, []byte("bind 127.0.0.1\nport "+strconv.Itoa(port)+"\n"+
		"dir "+rs.master.Path(dir)+"\nlogfile sentinel.log\n"+
		"sentinel monitor m 127.0.0.1 "+strconv.Itoa(rs.master.Port)+" 1\n"+
		"sentinel down-after-milliseconds m 500\nsentinel failover-timeout m 5000\n"), 0o600))
	cmd := rs.master.Command(rs.master.Path(conf), "--sentinel")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := "127.0.0.1:" + strconv.Itoa(port)
	sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
	defer sc.Close()
	// Wait until the sentinel knows the replica, or it cannot promote it.
	deadline := time.Now().Add(20 * time.Second)
	for {
		reps, err := sc.Replicas(context.Background(), "m").Result()
		if err == nil && len(reps) == 1 {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("sentinel never saw the replica: %v %v", err, reps)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func viaSentinel(t *testing.T, sv server, masterPort, replicaPort, sentinelPort int) deployment {
	rs := startReplicated(t, sv, masterPort, replicaPort)
	addr := startSentinel(t, sentinelPort, rs)
	client := func(t *testing.T) redisstore.Client {
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{addr},
			MaxRetries: -1, DialTimeout: 300 * time.Millisecond})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	return deployment{rs: rs, before: client, after: client,
		failover: func(t *testing.T) {
			rs.master.Stop()
			sc := redis.NewSentinelClient(&redis.Options{Addr: addr})
			defer sc.Close()
			want := strconv.Itoa(rs.replica.Port)
			deadline := time.Now().Add(30 * time.Second)
			for {
				m, err := sc.GetMasterAddrByName(context.Background(), "m").Result()
				if err == nil && len(m) == 2 && m[1] == want {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("sentinel did not promote the replica: %v %v", err, m)
				}
				time.Sleep(100 * time.Millisecond)
			}
			// The promoted replica accepts writes once it left read-only.
			c := redis.NewClient(&redis.Options{Addr: rs.replica.Addr})
			defer c.Close()
			for time.Now().Before(deadline) {
				role, err := c.Do(context.Background(), "ROLE").Slice()
				if err == nil && len(role) > 0 && role[0] == "master" {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
			t.Fatal("promoted replica never became master")
		},
	}
}

// TestSentinelFailoverWithoutReplicaAckDuplicates: the same hole through
// Redis Sentinel and redis.NewFailoverClient.
func TestSentinelFailoverWithoutReplicaAckDuplicates(t *testing.T) {
	for _, sv := range servers(7231, 7291) {
		t.Run(sv.name, func(t *testing.T) {
			d := viaSentinel(t, sv, sv.port, sv.port+1, sv.port+2)
			assertDefaultRefuses(t, d)
			r, lagErr := failoverScenario(t, d, redisstore.AcceptAsyncReplication())
			assertUnsafeDuplicates(t, r, lagErr)
		})
	}
}

// TestSentinelFailoverWithReplicaAck: through Sentinel, WithReplicaAck
// fails the lagging claim cleanly and the key runs once.
func TestSentinelFailoverWithReplicaAck(t *testing.T) {
	for _, sv := range servers(7234, 7294) {
		t.Run(sv.name, func(t *testing.T) {
			r, lagErr := failoverScenario(t, viaSentinel(t, sv, sv.port, sv.port+1, sv.port+2), redisstore.WithReplicaAck(1, ackWait))
			assertAckedOnce(t, r, lagErr)
		})
	}
}
