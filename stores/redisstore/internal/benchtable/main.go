// Command benchtable prints the Redis store's cost tables, for each
// deployment given: a Redis server (-redis, default $IDEM_REDIS_ADDR), a
// Redis Cluster (-redis-cluster, default $IDEM_REDIS_CLUSTER), a server
// whose SET has IFEQ (-valkey, default $IDEM_VALKEY_ADDR) and a Cluster of
// them (-valkey-cluster, default $IDEM_VALKEY_CLUSTER). On the last two the
// store completes a fresh call with SET ... IFEQ instead of a script.
//
// For each deployment, in one run: per call, the server's command time
// (INFO commandstats, CONFIG RESETSTAT between phases) and the client's
// user CPU (rusage) for raw GET, idem replay, raw SET NX PX + SET and idem
// fresh (-redis-cost-calls each, 40000 by default), with the ratios; and the
// throughput ratio idem/raw for replays and fresh calls with
// -redis-latency (200µs) added in each direction by an in-process delaying
// pipe under every connection (alternating rounds, median), for each of
// -redis-latency-callers (8 and 64 concurrent callers: 8 are limited by the
// network, 64 on a two-core machine by its CPU), after measuring what the
// pipe really adds. The cost table's "floor" row is a claim and a minimal
// script that checks the claim's value before it writes: the least a
// completion that only its claim may make costs on a Redis without
// SET ... IFEQ. -redis-table adds the long throughput table (idem vs raw
// with 64 goroutines, the floor and prototype rows, the store without a
// Guard). On a standalone server it also prints the Wait wake-up latency
// after the owner finishes, woken by the store's pub/sub against a Guard
// that polls (-redis-wake-samples each; 0 skips it).
//
//	go run ./stores/redisstore/internal/benchtable -redis 127.0.0.1:6379
//	go run ./stores/redisstore/internal/benchtable -redis 127.0.0.1:6379 -redis-cluster 127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/idem-go/idem/stores/redisstore/internal/redisbench"
	"github.com/redis/go-redis/v9"
)

func main() {
	redisAddr := flag.String("redis", os.Getenv("IDEM_REDIS_ADDR"), "Redis address (empty: skip)")
	clusterAddrs := flag.String("redis-cluster", os.Getenv("IDEM_REDIS_CLUSTER"), "comma-separated Redis Cluster addresses (empty: skip)")
	valkeyAddr := flag.String("valkey", os.Getenv("IDEM_VALKEY_ADDR"), "address of a Valkey 8.1+ or Redis 8.4+ server, whose SET has IFEQ, for the same tables (empty: skip)")
	valkeyCluster := flag.String("valkey-cluster", os.Getenv("IDEM_VALKEY_CLUSTER"), "comma-separated addresses of a Cluster of such servers (empty: skip)")
	calls := flag.Int("redis-calls", 4000, "calls per variant per round in the throughput tables")
	rounds := flag.Int("redis-rounds", 3, "alternating rounds in the throughput tables (the median round is reported)")
	costCalls := flag.Int("redis-cost-calls", 40000, "calls per phase in the cost table")
	latency := flag.Duration("redis-latency", 200*time.Microsecond, "latency added in each direction in the latency table")
	latencyCallers := flag.String("redis-latency-callers", "8,64", "comma-separated numbers of concurrent callers in the latency table (1 to 64)")
	longTable := flag.Bool("redis-table", false, "also print the long throughput table (idem vs raw, prototype rows)")
	wakeSamples := flag.Int("redis-wake-samples", 10, "Wait wake-up samples per mode on a standalone server (0: skip)")
	takeover := flag.Duration("redis-takeover", 30*time.Second, "Guard takeover threshold in the wake-up table (bounds the poll interval)")
	flag.Parse()
	var callers []int
	for _, f := range strings.Split(*latencyCallers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > redisbench.Workers {
			fmt.Fprintf(os.Stderr, "-redis-latency-callers: %q is not a number of callers from 1 to %d\n", f, redisbench.Workers)
			os.Exit(2)
		}
		callers = append(callers, n)
	}
	if *calls < 1 || *rounds < 1 || *costCalls < 1 || *wakeSamples < 0 {
		fmt.Fprintln(os.Stderr, "-redis-calls, -redis-rounds and -redis-cost-calls must be positive, -redis-wake-samples not negative")
		os.Exit(2)
	}
	if *redisAddr == "" && *clusterAddrs == "" && *valkeyAddr == "" && *valkeyCluster == "" {
		fmt.Fprintln(os.Stderr, "benchtable: no deployment: give -redis, -redis-cluster, -valkey or -valkey-cluster (or set IDEM_REDIS_ADDR, ...)")
		os.Exit(2)
	}
	ctx := context.Background()
	t := tables{costCalls: *costCalls, calls: *calls, rounds: *rounds, latency: *latency, callers: callers,
		long: *longTable, wakeSamples: *wakeSamples, takeover: *takeover}
	// Each deployment's tables, in this order: a standalone server and a
	// Cluster of Redis 7, then of servers whose SET has IFEQ.
	for _, d := range []struct {
		name, addrs string
		cluster     bool
	}{
		{"Redis", *redisAddr, false},
		{"Redis Cluster", *clusterAddrs, true},
		{"Valkey", *valkeyAddr, false},
		{"Valkey Cluster", *valkeyCluster, true},
	} {
		if d.addrs == "" {
			continue
		}
		if err := t.print(ctx, d.name+" "+d.addrs, strings.Split(d.addrs, ","), d.cluster); err != nil {
			fmt.Fprintf(os.Stderr, "benchtable: %s: %v\n", d.name, err)
			os.Exit(1)
		}
	}
}

type dialer = func(ctx context.Context, network, addr string) (net.Conn, error)

func redisClient(addr string, dial dialer) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: addr, PoolSize: redisbench.Workers,
		MinIdleConns: redisbench.Workers, Dialer: dial})
}

func clusterClient(addrs []string, dial dialer) *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, PoolSize: redisbench.Workers,
		MinIdleConns: redisbench.Workers, Dialer: dial})
}

// tables is what the flags ask of every deployment's tables.
type tables struct {
	costCalls, calls, rounds int
	latency                  time.Duration
	callers                  []int
	long                     bool
	wakeSamples              int
	takeover                 time.Duration
}

// print prints the cost table and the latency table of one deployment,
// the long throughput table when asked, and on a standalone server the
// wake-up table.
func (t tables) print(ctx context.Context, name string, addrs []string, cluster bool) error {
	pair := func(dial dialer) (redis.UniversalClient, redis.UniversalClient) {
		if cluster {
			return clusterClient(addrs, dial), clusterClient(addrs, dial)
		}
		return redisClient(addrs[0], dial), redisClient(addrs[0], dial)
	}
	gc, rc := pair(nil)
	defer gc.Close()
	defer rc.Close()
	if err := redisbench.CostTable(ctx, os.Stdout, name, gc, rc, t.costCalls); err != nil {
		return err
	}
	if err := redisbench.LatencyTable(ctx, os.Stdout, name, t.latency, pair, t.calls, t.rounds, t.callers...); err != nil {
		return err
	}
	if t.long {
		if err := redisbench.Table(ctx, os.Stdout, name, gc, rc, t.calls, 5); err != nil {
			return err
		}
	}
	if cluster || t.wakeSamples == 0 {
		return nil
	}
	return wakeTable(ctx, name, addrs[0], t.wakeSamples, t.takeover)
}

// wakeTable prints the Wait wake-up latency on the server at addr, with
// push and with the poll.
func wakeTable(ctx context.Context, name, addr string, samples int, takeover time.Duration) error {
	fmt.Printf("\n%s: Wait wake-up latency after the owner finishes (takeover %v, %d samples each)\n", name, takeover, samples)
	for _, poll := range []bool{false, true} {
		owner, waiter := redisbench.NewClient(addr), redisbench.NewClient(addr)
		lat, err := redisbench.WakeLatency(ctx, owner, waiter, poll, samples, takeover)
		_ = owner.Close()
		_ = waiter.Close()
		if err != nil {
			return err
		}
		mode := "push (pub/sub)"
		if poll {
			mode = "poll (no Watcher)"
		}
		fmt.Printf("%-20s median %10v  max %10v\n", mode, redisbench.Median(lat).Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond))
	}
	return nil
}
