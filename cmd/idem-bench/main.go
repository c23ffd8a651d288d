// Command idem-bench prints a table of what a guarded call costs on the
// embedded stores: time and allocations per call, store operations and
// heartbeats per call, and throughput against the same store operations
// made directly. A fresh call must cost 2 store operations, a replay 1, and
// a call shorter than the heartbeat interval no heartbeat.
//
//	go run ./cmd/idem-bench            # the table
//	go run ./cmd/idem-bench -soak 10m  # the soak table: what the stores hold over time
//	go run ./cmd/idem-bench -deadowner 20  # the dead-owner table: what a crash costs
//
// The server stores' tables come from programs of their modules:
// go run ./stores/redisstore/internal/benchtable (Redis, Redis Cluster,
// Valkey: command time and client CPU per call, throughput with added
// latency), ./stores/sqlstore/internal/benchtable (PostgreSQL: Wait
// wake-up, DoTx and StepTx cost) and ./stores/dynamostore/internal/benchtable
// (DynamoDB: throughput, requests and capacity units per call).
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
// With -deadowner N it prints only the dead-owner table, on filestore and
// on each server store whose address is in the environment the tests read
// (IDEM_POSTGRES_DSN, IDEM_MYSQL_DSN, IDEM_REDIS_ADDR, IDEM_REDIS_CLUSTER,
// IDEM_NATS_URL, IDEM_DYNAMODB_ENDPOINT), and SQLite, each on a fresh
// namespace removed at the end. Child processes (this binary run again)
// hold claims and are SIGKILLed at a random point inside fn: (a) the time
// from the kill to the result of a duplicate already waiting (Wait), (b)
// to the first success of a caller retrying every 100 ms (Return), after
// (the store as it is, default options) and before (its presence hidden
// from the Guard: the 30s threshold, -deadowner-before runs); (c) the time
// from the kill to the result of a process restarted with the same
// WithInstanceID; (d) 100 owners SIGSTOPped for half the threshold (1s of
// 2s) while callers retry: takeovers and runs of fn by others, both 0.
//
//	go run ./cmd/idem-bench
//	go run ./cmd/idem-bench -soak 3m
//	go run ./cmd/idem-bench -deadowner 20
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/internal/benchkit"
	"github.com/idem-go/idem/stores/filestore"
	"github.com/idem-go/idem/stores/memstore"
)

func main() {
	if os.Getenv(deadRoleEnv) != "" {
		os.Exit(deadChild())
	}
	testing.Init()
	pgDSN := flag.String("postgres", os.Getenv("IDEM_POSTGRES_DSN"), "PostgreSQL DSN for the soak table (empty: skip)")
	soak := flag.Duration("soak", 0, "run only the soak table: fresh keys at -soak-rate for this long per store (0: skip)")
	soakRate := flag.Int("soak-rate", 500, "fresh calls per second in the soak table")
	soakTTL := flag.Duration("soak-ttl", 5*time.Second, "the Guard's TTL in the soak table")
	soakRetention := flag.Duration("soak-retention", 2*time.Second, "the stores' retention in the soak table")
	soakCleanup := flag.Duration("soak-cleanup", 5*time.Second, "the stores' clean-up interval in the soak table")
	soakInterval := flag.Duration("soak-interval", 10*time.Second, "time between the soak table's rows")
	soakList := flag.String("soak-stores", "all", "comma-separated stores for the soak table: memstore,filestore,postgres,mariadb,natsstore")
	mysqlDSN := flag.String("mysql", os.Getenv("IDEM_MYSQL_DSN"), "MySQL/MariaDB DSN for the soak table (empty: skip)")
	natsURL := flag.String("nats", os.Getenv("IDEM_NATS_URL"), "NATS URL for the soak table (empty: skip)")
	deadOwner := flag.Int("deadowner", 0, "run only the dead-owner table: this many runs of each measurement per store (0: skip)")
	deadBefore := flag.Int("deadowner-before", 2, "runs of the dead-owner table's before column per store (each waits for the 30s threshold)")
	deadList := flag.String("deadowner-stores", "all", "comma-separated stores for the dead-owner table: filestore,PostgreSQL,MariaDB,Redis,Redis Cluster,NATS,DynamoDB,SQLite")
	flag.Parse()
	if *deadOwner > 0 {
		os.Exit(runDeadOwner(os.Stdout, *deadOwner, *deadBefore, soakSelected(*deadList)))
	}
	if *soak > 0 {
		os.Exit(runSoak(soakConfig{run: *soak, interval: *soakInterval, ttl: *soakTTL, retention: *soakRetention,
			cleanup: *soakCleanup, rate: *soakRate}, *soakList, *pgDSN, *mysqlDSN, *natsURL))
	}
	dir, err := os.MkdirTemp("", "idem-bench-")
	exitOn(err)
	defer os.RemoveAll(dir)
	fs, err := filestore.New(dir)
	exitOn(err)
	mem, err := memstore.New()
	exitOn(err)
	stores := []struct {
		name  string
		store storekit.Store
	}{{"memstore", mem}, {"filestore", fs}}

	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(w, "store\tcall\tns/call\tallocs/call\tstore ops/call\theartbeats/call\traw ns/call\tthroughput vs raw\t")
	bad := false
	for _, s := range stores {
		for _, c := range []struct {
			name  string
			guard func(b *testing.B, s storekit.Store) (int, int)
			raw   func(b *testing.B, s storekit.Store)
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
}

// exitOn ends the program when err is not nil.
func exitOn(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
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
