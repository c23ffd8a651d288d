// Command idem-bench prints a table of what a guarded call costs on the
// embedded stores: time and allocations per call, store operations and
// heartbeats per call, and throughput against the same store operations
// made directly. A fresh call must cost 2 store operations, a replay 1, and
// a call shorter than the heartbeat interval no heartbeat.
//
//	go run ./cmd/idem-bench
package main

import (
	"fmt"
	"os"
	"testing"
	"text/tabwriter"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/benchkit"
	"github.com/idem-go/idem/stores/filestore"
	"github.com/idem-go/idem/stores/memstore"
)

func main() {
	testing.Init()
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
	stores := []struct {
		name  string
		store idem.Store
	}{{"memstore", memstore.New()}, {"filestore", fs}}

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
	fmt.Println("fresh = 2 store operations, replay = 1, no heartbeat for short calls")
}
