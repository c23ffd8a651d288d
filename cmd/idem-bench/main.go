// Command idem-bench prints a table of what a guarded call costs on the
// embedded stores: time and allocations per call, store operations and
// heartbeats per call, and throughput against the same store operations
// made directly. A fresh call must cost 2 store operations, a replay 1, and
// a call shorter than the heartbeat interval no heartbeat.
//
// With a Redis address (-redis, default $IDEM_REDIS_ADDR) and a Cluster
// (-redis-cluster, default $IDEM_REDIS_CLUSTER) it also prints, for each,
// in one run: per call, the server's command time (INFO commandstats,
// CONFIG RESETSTAT between phases) and the client's user CPU (rusage) for
// raw GET, idem replay, raw SET NX PX + SET and idem fresh (-redis-cost-calls
// each, 40000 by default), with the ratios; and the throughput ratio
// idem/raw for replays and fresh calls with -redis-latency (200µs) added in
// each direction by an in-process delaying pipe under every connection
// (alternating rounds, median), for each of -redis-latency-callers (8 and
// 64 concurrent callers: 8 are limited by the network, 64 on a two-core
// machine by its CPU), after measuring what the pipe really adds. With a
// server whose SET has IFEQ (-valkey, default $IDEM_VALKEY_ADDR) and a
// Cluster of them (-valkey-cluster, default $IDEM_VALKEY_CLUSTER) it prints
// the same tables for each: there the store completes a fresh call with
// SET ... IFEQ instead of a script. The cost table's "floor" row is a claim and a
// minimal script that checks the claim's value before it writes: the least
// a completion that only its claim may make costs on a Redis without
// SET ... IFEQ. -redis-table adds the longer throughput
// table of earlier releases (idem vs raw and the prototype rows).
//
// With a PostgreSQL DSN (-postgres, default $IDEM_POSTGRES_DSN) it also
// prints the median and 90th percentile Wait wake-up of a waiter in another
// Guard after the owner returns, woken by LISTEN/NOTIFY against the Guard's
// poll (-postgres-samples calls each, 15 by default: a few seconds), and
// what a sqlstore.DoTx whose fn inserts one row costs next to the same
// INSERT in a plain transaction (time and round trips per call), and the
// same for the steps of a call: a Step, a sqlstore.StepTx that runs and
// one replayed.
//
// With -soak D it prints only the soak table: fresh keys at -soak-rate per
// second with a short TTL (-soak-ttl) for D on each store (memory, files,
// and PostgreSQL, MariaDB (-mysql) and NATS (-nats) when their address is
// given), clean-up on, a row every -soak-interval with what the store
// holds (records, files, rows, stream messages, bytes, heap) and the fresh
// calls' p50, p99 and worst, then a row after the load stopped and every
// record expired. What a store holds must plateau, and the latency stay
// flat.
//
//	go run ./cmd/idem-bench
//	go run ./cmd/idem-bench -soak 3m
//	go run ./cmd/idem-bench -redis 127.0.0.1:6379 -redis-cluster 127.0.0.1:7101,127.0.0.1:7102,127.0.0.1:7103
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/benchkit"
	"github.com/idem-go/idem/stores/filestore"
	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/redisstore/redisbench"
	"github.com/idem-go/idem/stores/sqlstore/sqlbench"
	"github.com/redis/go-redis/v9"
)

func main() {
	testing.Init()
	redisAddr := flag.String("redis", os.Getenv("IDEM_REDIS_ADDR"), "Redis address for the Redis table (empty: skip)")
	clusterAddrs := flag.String("redis-cluster", os.Getenv("IDEM_REDIS_CLUSTER"), "comma-separated Redis Cluster addresses (empty: skip)")
	valkeyAddr := flag.String("valkey", os.Getenv("IDEM_VALKEY_ADDR"), "address of a Valkey 8.1+ or Redis 8.4+ server, whose SET has IFEQ, for the same tables (empty: skip)")
	valkeyCluster := flag.String("valkey-cluster", os.Getenv("IDEM_VALKEY_CLUSTER"), "comma-separated addresses of a Cluster of such servers (empty: skip)")
	calls := flag.Int("redis-calls", 4000, "calls per variant per round in the Redis throughput tables")
	rounds := flag.Int("redis-rounds", 3, "alternating rounds in the Redis throughput tables (the median round is reported)")
	costCalls := flag.Int("redis-cost-calls", 40000, "calls per phase in the Redis cost table")
	latency := flag.Duration("redis-latency", 200*time.Microsecond, "latency added in each direction in the Redis latency table")
	latencyCallers := flag.String("redis-latency-callers", "8,64", "comma-separated numbers of concurrent callers in the Redis latency table (1 to 64)")
	longTable := flag.Bool("redis-table", false, "also print the long Redis throughput table (idem vs raw, prototype rows)")
	pgDSN := flag.String("postgres", os.Getenv("IDEM_POSTGRES_DSN"), "PostgreSQL DSN for the Wait wake-up table (empty: skip)")
	pgSamples := flag.Int("postgres-samples", 15, "Wait wake-up samples per waiter kind in the PostgreSQL table")
	soak := flag.Duration("soak", 0, "run only the soak table: fresh keys at -soak-rate for this long per store (0: skip)")
	soakRate := flag.Int("soak-rate", 500, "fresh calls per second in the soak table")
	soakTTL := flag.Duration("soak-ttl", 5*time.Second, "the Guard's TTL in the soak table")
	soakRetention := flag.Duration("soak-retention", 2*time.Second, "the stores' retention in the soak table")
	soakCleanup := flag.Duration("soak-cleanup", 5*time.Second, "the stores' clean-up interval in the soak table")
	soakInterval := flag.Duration("soak-interval", 10*time.Second, "time between the soak table's rows")
	soakList := flag.String("soak-stores", "all", "comma-separated stores for the soak table: memstore,filestore,postgres,mariadb,natsstore")
	mysqlDSN := flag.String("mysql", os.Getenv("IDEM_MYSQL_DSN"), "MySQL/MariaDB DSN for the soak table (empty: skip)")
	natsURL := flag.String("nats", os.Getenv("IDEM_NATS_URL"), "NATS URL for the soak table (empty: skip)")
	flag.Parse()
	if *soak > 0 {
		os.Exit(runSoak(soakConfig{run: *soak, interval: *soakInterval, ttl: *soakTTL, retention: *soakRetention,
			cleanup: *soakCleanup, rate: *soakRate}, *soakList, *pgDSN, *mysqlDSN, *natsURL))
	}
	var callers []int
	for _, f := range strings.Split(*latencyCallers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > redisbench.Workers {
			fmt.Fprintf(os.Stderr, "-redis-latency-callers: %q is not a number of callers from 1 to %d\n", f, redisbench.Workers)
			os.Exit(2)
		}
		callers = append(callers, n)
	}
	if *pgSamples < 1 {
		fmt.Fprintln(os.Stderr, "-postgres-samples must be at least 1")
		os.Exit(2)
	}
	dir, err := os.MkdirTemp("", "idem-bench-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer os.RemoveAll(dir)
	fs, err := filestore.New(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	mem, err := memstore.New()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	stores := []struct {
		name  string
		store idem.Store
	}{{"memstore", mem}, {"filestore", fs}}

	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "store\tcall\tns/call\tallocs/call\tstore ops/call\theartbeats/call\traw ns/call\tthroughput vs raw\t")
	bad := false
	for _, s := range stores {
		for _, c := range []struct {
			name  string
			guard func(b *testing.B, s idem.Store) (int, int)
			raw   func(b *testing.B, s idem.Store)
			want  float64
		}{
			{"fresh", benchkit.Fresh, benchkit.RawFresh, 2},
			{"replay", benchkit.Replay, benchkit.RawReplay, 1},
			// A fresh call of one step: 2 for the call, 1 for the steps
			// epoch, 2 for the step that runs.
			{"step run", benchkit.StepFresh, benchkit.RawFresh, 5},
			// An attempt that replays a recorded step and fails: claim,
			// epoch, 1 for the replayed step, release.
			{"step replay", benchkit.StepReplay, benchkit.RawReplay, 4},
		} {
			g := benchkit.Run(func(b *testing.B) (int, int) { return c.guard(b, s.store) })
			r := benchkit.RunRaw(func(b *testing.B) { c.raw(b, s.store) })
			fmt.Fprintf(w, "%s\t%s\t%.0f\t%d\t%.2f\t%.2f\t%.0f\t%.2f\t\n",
				s.name, c.name, g.NsPerOp, g.AllocsPerOp, g.OpsPerCall, g.Heartbeats, r.NsPerOp, r.NsPerOp/g.NsPerOp)
			if g.OpsPerCall != c.want || g.Heartbeats != 0 {
				bad = true
			}
		}
	}
	w.Flush()
	if bad {
		fmt.Println("FAIL: a call cost more store operations than the minimum")
		os.Exit(1)
	}
	fmt.Println("fresh = 2 store operations, replay = 1, no heartbeat for short calls;")
	fmt.Println("a step that runs = 2, a replayed step = 1, plus 1 per attempt that uses steps (the steps epoch)")

	ctx := context.Background()
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
		addrs := strings.Split(d.addrs, ",")
		pair := func(dial dialer) (redis.UniversalClient, redis.UniversalClient) {
			if d.cluster {
				return clusterClient(addrs, dial), clusterClient(addrs, dial)
			}
			return redisClient(d.addrs, dial), redisClient(d.addrs, dial)
		}
		if err := redisTables(ctx, d.name+" "+d.addrs, pair, *costCalls, *calls, *rounds, *latency, callers, *longTable); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", d.name, err)
			os.Exit(1)
		}
	}
	if *pgDSN != "" {
		if err := sqlbench.WakeTable(context.Background(), os.Stdout, *pgDSN, *pgSamples); err != nil {
			fmt.Fprintln(os.Stderr, "postgres:", err)
			os.Exit(1)
		}
		if err := sqlbench.TxTable(context.Background(), os.Stdout, *pgDSN, 200); err != nil {
			fmt.Fprintln(os.Stderr, "postgres DoTx:", err)
			os.Exit(1)
		}
		if err := stepTxTable(context.Background(), os.Stdout, *pgDSN, 200); err != nil {
			fmt.Fprintln(os.Stderr, "postgres StepTx:", err)
			os.Exit(1)
		}
	}
}

// runSoak prints the soak table and returns the exit code.
func runSoak(c soakConfig, list, pgDSN, mysqlDSN, natsURL string) int {
	if c.rate < 1 || c.ttl <= 0 || c.retention < 0 || c.cleanup <= 0 || c.interval <= 0 {
		fmt.Fprintln(os.Stderr, "-soak-rate, -soak-ttl, -soak-cleanup and -soak-interval must be positive, -soak-retention not negative")
		return 2
	}
	dir, err := os.MkdirTemp("", "idem-soak-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	all, err := soakStores(ctx, c, dir, pgDSN, mysqlDSN, natsURL)
	if err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 1
	}
	selected := soakSelected(list)
	var stores []soakStore
	for _, s := range all {
		if selected(s.name) {
			stores = append(stores, s)
		} else {
			_ = s.close()
		}
	}
	if err := soakTable(ctx, os.Stdout, c, stores); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		return 1
	}
	return 0
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

// redisTables prints the cost table and the latency table of one
// deployment (and the long throughput table when asked).
func redisTables(ctx context.Context, name string, pair func(dialer) (redis.UniversalClient, redis.UniversalClient),
	costCalls, calls, rounds int, latency time.Duration, callers []int, long bool) error {
	gc, rc := pair(nil)
	defer gc.Close()
	defer rc.Close()
	if err := redisbench.CostTable(ctx, os.Stdout, name, gc, rc, costCalls); err != nil {
		return err
	}
	if err := redisbench.LatencyTable(ctx, os.Stdout, name, latency, pair, calls, rounds, callers...); err != nil {
		return err
	}
	if long {
		return redisbench.Table(ctx, os.Stdout, name, gc, rc, calls, 5)
	}
	return nil
}
