package natscluster_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/stores/natsstore"
	"github.com/idem-go/idem/stores/storetest"
)

// cluster is three JetStream servers in this process, routed to each other
// on loopback.
type cluster struct {
	servers []*server.Server
	opts    []*server.Options
	urls    []string
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startCluster starts three servers on free loopback ports. A port picked
// free can be taken by another test's listener before the server binds it,
// and a server that cannot bind never becomes ready: such a cluster is shut
// down and started again on other ports (three tries).
func startCluster(t *testing.T) *cluster {
	t.Helper()
	for try := 1; ; try++ {
		c, ok := tryCluster(t)
		if ok {
			return c.ready(t)
		}
		c.shutdown()
		if try == 3 {
			t.Fatalf("a 3-server cluster did not start in %d tries", try)
		}
		t.Logf("a server did not start (try %d): starting the cluster again on other ports", try)
	}
}

func (c *cluster) shutdown() {
	for _, s := range c.servers {
		if s != nil {
			s.Shutdown()
		}
	}
}

func tryCluster(t *testing.T) (*cluster, bool) {
	t.Helper()
	c := &cluster{}
	routePorts := []int{freePort(t), freePort(t), freePort(t)}
	var routes []string
	for _, p := range routePorts {
		routes = append(routes, fmt.Sprintf("nats://127.0.0.1:%d", p))
	}
	for i := range 3 {
		o := &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1),
			Host:       "127.0.0.1",
			Port:       freePort(t),
			JetStream:  true,
			StoreDir:   t.TempDir(),
			Cluster:    server.ClusterOpts{Name: "idem", Host: "127.0.0.1", Port: routePorts[i]},
			Routes:     server.RoutesFromStr(strings.Join(routes, ",")),
			NoLog:      true,
			NoSigs:     true,
		}
		c.opts = append(c.opts, o)
		c.urls = append(c.urls, fmt.Sprintf("nats://127.0.0.1:%d", o.Port))
		c.servers = append(c.servers, nil)
		if !c.tryStart(t, i) {
			return c, false
		}
	}
	return c, true
}

// ready waits for the JetStream meta group to elect a leader.
func (c *cluster) ready(t *testing.T) *cluster {
	t.Helper()
	t.Cleanup(c.shutdown)
	_, js := connect(t, strings.Join(c.urls, ","))
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("JetStream cluster not ready: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *cluster) start(t *testing.T, i int) {
	t.Helper()
	require.True(t, c.tryStart(t, i), "server %d did not start", i)
}

// tryStart starts server i and reports whether it became ready.
func (c *cluster) tryStart(t *testing.T, i int) bool {
	t.Helper()
	s, err := server.NewServer(c.opts[i])
	require.NoError(t, err)
	go s.Start()
	if !s.ReadyForConnections(30 * time.Second) {
		s.Shutdown()
		return false
	}
	c.servers[i] = s
	return true
}

// kill shuts down the server named name and returns its index.
func (c *cluster) kill(t *testing.T, name string) int {
	t.Helper()
	for i, s := range c.servers {
		if s != nil && s.Name() == name {
			s.Shutdown()
			s.WaitForShutdown()
			c.servers[i] = nil
			return i
		}
	}
	t.Fatalf("no running server %q", name)
	return -1
}

// streamLeader is the server leading the bucket's stream.
func streamLeader(t *testing.T, js jetstream.JetStream, bucket string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := js.Stream(ctx, "KV_"+bucket)
	require.NoError(t, err)
	info, err := st.Info(ctx)
	require.NoError(t, err)
	if info.Cluster == nil || info.Cluster.Leader == "" {
		t.Fatalf("stream KV_%s has no leader", bucket)
	}
	return info.Cluster.Leader
}

// claimAll has every contender claim every key once (each with its own
// nonce, retrying a failed claim with the same nonce, as a Guard's caller
// would retry), while kill runs once half the claims are done. It returns
// how many keys more than one contender claimed, and how many claims
// failed for good.
func claimAll(t *testing.T, stores []*natsstore.Store, keys []string, kill func()) (dups, failed int) {
	t.Helper()
	var (
		mu      sync.Mutex
		winners = map[string]int{}
		done    atomic.Int64
		once    sync.Once
		lost    atomic.Int64
		wg      sync.WaitGroup
	)
	half := int64(len(keys) * len(stores) / 2)
	for ci, s := range stores {
		for w := range 4 { // 4 workers per contender, each on a quarter of the keys
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ki := w; ki < len(keys); ki += 4 {
					key := keys[ki]
					req := storekit.ClaimRequest{Key: key, Nonce: fmt.Sprintf("c%d-%s", ci, storetest.NewNonce()), LeaseTTL: 10 * time.Minute, TakeoverAfter: 10 * time.Minute}
					var res storekit.ClaimResult
					var err error
					for try := 0; try < 60; try++ {
						ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
						res, err = s.Claim(ctx, req)
						cancel()
						if err == nil {
							break
						}
						time.Sleep(250 * time.Millisecond)
					}
					if err != nil {
						lost.Add(1)
						continue
					}
					if res.Outcome == storekit.Claimed {
						mu.Lock()
						winners[key]++
						mu.Unlock()
					}
					if done.Add(1) == half {
						once.Do(kill)
					}
				}
			}()
		}
	}
	wg.Wait()
	for _, n := range winners {
		if n > 1 {
			dups++
		}
	}
	return dups, int(lost.Load())
}

func clusterStores(t *testing.T, c *cluster, bucket string, n int) []*natsstore.Store {
	t.Helper()
	var out []*natsstore.Store
	for i := range n {
		// Each contender is connected to a different server first, and
		// knows all three.
		urls := append([]string{c.urls[i%3]}, c.urls...)
		nc, err := nats.Connect(strings.Join(urls, ","), nats.DontRandomize(), nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		kv, err := js.KeyValue(context.Background(), bucket)
		require.NoError(t, err)
		s, err := natsstore.New(kv)
		require.NoError(t, err)
		out = append(out, s)
	}
	return out
}

func clusterKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = storetest.NewKey()
	}
	return keys
}

// TestLeaderKilledReplicated: on a bucket replicated 3 ways, claims taken
// while the leader of the bucket's stream is killed are never lost: across
// 1,000 keys and three contenders no key is claimed twice, with no store
// option. The conformance suite then runs on the two servers left, across
// the leader change.
func TestLeaderKilledReplicated(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-server cluster")
	}
	c := startCluster(t)
	_, js := connect(t, strings.Join(c.urls, ","))
	bucket := randName("idemr3_")
	_, err := natsstore.CreateBucket(ctxT(t), js, bucket, natsstore.WithReplicas(3))
	require.NoError(t, err)
	stores := clusterStores(t, c, bucket, 3)
	var killed string
	dups, failed := claimAll(t, stores, clusterKeys(1000), func() {
		killed = streamLeader(t, js, bucket)
		c.kill(t, killed)
	})
	t.Logf("R3: killed stream leader %s mid-run: %d keys claimed twice, %d claims failed for good", killed, dups, failed)
	require.Zero(t, dups, "an acknowledged claim was lost with the leader")
	require.Zero(t, failed)
	newLeader := streamLeader(t, js, bucket)
	require.NotEqual(t, killed, newLeader)

	t.Run("conformance after the leader change", func(t *testing.T) {
		storetest.Run(t, storetest.Harness{NewStore: func(t *testing.T) storekit.Store {
			name := randName("idemr3c_")
			kv, err := natsstore.CreateBucket(ctxT(t), js, name, natsstore.WithReplicas(2))
			require.NoError(t, err)
			waitAnswering(t, kv)
			s, err := natsstore.New(kv)
			require.NoError(t, err)
			return s
		}})
	})
}

// waitAnswering waits until a bucket just created answers reads: with one
// server of three dead, the new stream may still be electing its leader,
// and a read then fails with "no responders".
func waitAnswering(t *testing.T, kv jetstream.KeyValue) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		_, err := kv.Get(ctxT(t), "probe")
		if err == nil || errors.Is(err, jetstream.ErrKeyNotFound) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("bucket %s does not answer after a minute: %v", kv.Bucket(), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLeaderKilledUnreplicated is the same run on a bucket kept by one
// server in memory: when that server dies and comes back, the claims it
// had acknowledged are gone and other contenders claim those keys again.
// This is what replication by consensus buys.
func TestLeaderKilledUnreplicated(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a 3-server cluster")
	}
	c := startCluster(t)
	_, js := connect(t, strings.Join(c.urls, ","))
	bucket := randName("idemr1_")
	_, err := js.CreateKeyValue(ctxT(t), jetstream.KeyValueConfig{Bucket: bucket, History: 1, Replicas: 1, Storage: jetstream.MemoryStorage})
	require.NoError(t, err)
	stores := clusterStores(t, c, bucket, 3)
	var killed string
	dups, failed := claimAll(t, stores, clusterKeys(1000), func() {
		killed = streamLeader(t, js, bucket)
		i := c.kill(t, killed)
		time.Sleep(500 * time.Millisecond)
		c.start(t, i)
	})
	t.Logf("R1 in memory: killed and restarted %s mid-run: %d keys claimed twice, %d claims failed for good", killed, dups, failed)
	if dups == 0 {
		t.Logf("no duplicate this run (the restarted server lost its stream, claims failed instead)")
	}
}
