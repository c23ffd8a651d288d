package integration

import (
	"context"
	"flag"
	"math/rand/v2"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/anishathalye/porcupine"
)

var (
	linHistories = flag.Int("lin.histories", 50, "random histories per store in TestLinearizable")
	linSeed      = flag.Uint64("lin.seed", 0, "seed of the first history (0: random)")
)

// checkTimeout bounds porcupine's search on one history. A history this
// short, partitioned by key, is decided in milliseconds; a search cut short
// is reported as Unknown and logged, never counted as a pass or a failure.
const checkTimeout = 20 * time.Second

// verdict is porcupine's judgement of one history.
type verdict struct {
	result porcupine.CheckResult
	info   porcupine.LinearizationInfo
}

func check(ops []porcupine.Operation) verdict {
	res, info := porcupine.CheckOperationsVerbose(storeModel, ops, checkTimeout)
	return verdict{result: res, info: info}
}

// illegalKeys returns the keys whose own operations porcupine finds
// illegal.
func illegalKeys(ops []porcupine.Operation) []string {
	var keys []string
	for _, part := range storeModel.Partition(ops) {
		if porcupine.CheckOperationsTimeout(storeModel, part, checkTimeout) == porcupine.Illegal {
			keys = append(keys, part[0].Input.(linInput).Key)
		}
	}
	return keys
}

// report logs an illegal history: porcupine's visualization written to a
// temporary file, and the operations on each illegal key.
func report(t testing.TB, name string, seed uint64, ops []porcupine.Operation, v verdict) {
	t.Helper()
	var b strings.Builder
	if f, err := os.CreateTemp("", "idem-lin-"+name+"-*.html"); err != nil {
		t.Logf("visualization: %v", err)
	} else {
		if err := porcupine.Visualize(storeModel, v.info, f); err != nil {
			t.Logf("visualization: %v", err)
		}
		_ = f.Close()
		b.WriteString("visualization: " + f.Name() + "\n")
	}
	for _, key := range illegalKeys(ops) {
		b.WriteString("operations on the illegal key:\n" + formatKeyHistory(ops, key))
	}
	t.Logf("%s: history (seed %d) is not linearizable:\n%s", name, seed, b.String())
}

func firstSeed() uint64 {
	if *linSeed != 0 {
		return *linSeed
	}
	return rand.Uint64() >> 1
}

// TestLinearizable runs random concurrent histories of claims, heartbeats,
// completions, releases, reads and deletes (several clients, a few keys,
// takeovers by short and long thresholds) against every store on its real
// backend, and checks each history with porcupine against the model of the
// Store contract.
func TestLinearizable(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			s := b.open(t)
			cfg := defaultHistory
			cfg.Cleans = b.cleans
			runAndCheck(t, b.name, s, cfg, *linHistories)
			if n, ok := ifeqUsed(s); ok {
				// The conditional completion is what this backend checks.
				t.Logf("%s: %d conditional completions (SET ... IFEQ, or lua/set_ifeq.lua)", b.name, n)
				if n == 0 {
					t.Errorf("%s: no conditional completion", b.name)
				}
			}
		})
	}
}

// purgesIn counts the Purge calls in ops (each is an operation on every
// key) and the records they removed.
func purgesIn(ops []porcupine.Operation) (purges, removed int) {
	var key string
	for _, op := range ops {
		if in := op.Input.(linInput); in.Op == opPurge {
			if key == "" {
				key = in.Key
			}
			if in.Key == key {
				purges++
				removed += op.Output.(linOutput).Removed
			}
		}
	}
	return purges, removed
}

// runAndCheck runs n histories on s and fails t for each illegal one.
func runAndCheck(t *testing.T, name string, s storekit.Store, cfg historyConfig, n int) {
	t.Helper()
	seed := firstSeed()
	var illegal, unknown, total, purges, removed int
	var nops atomic.Int64
	began := time.Now()
	for i := range n {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		ops, err := runHistory(ctx, s, cfg, seed+uint64(i))
		cancel()
		if err != nil {
			t.Fatalf("%s: history (seed %d): %v", name, seed+uint64(i), err)
		}
		p, r := purgesIn(ops)
		purges, removed = purges+p, removed+r
		nops.Add(int64(len(ops)))
		total++
		switch v := check(ops); v.result {
		case porcupine.Illegal:
			illegal++
			if illegal <= 3 {
				report(t, name, seed+uint64(i), ops, v)
			}
		case porcupine.Unknown:
			unknown++
			t.Logf("%s: history (seed %d): check timed out after %v", name, seed+uint64(i), checkTimeout)
		}
	}
	t.Logf("%s: %d histories (%d operations, seeds %d..%d) in %v: %d illegal, %d undecided",
		name, total, nops.Load(), seed, seed+uint64(n)-1, time.Since(began).Round(time.Millisecond), illegal, unknown)
	if cfg.Cleans {
		t.Logf("%s: %d purges beside the clients removed %d records", name, purges, removed)
	}
	if illegal > 0 {
		t.Errorf("%s: %d of %d histories are not linearizable", name, illegal, total)
	}
}
