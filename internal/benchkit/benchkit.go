// Package benchkit holds the benchmark bodies shared by the go test
// benchmarks of every store and the idem-bench command, so all of them
// measure the same thing: store operations and heartbeats per call, and the
// latency of a Wait-mode duplicate's wake-up. A third-party store can run
// them on itself. It depends on the standard library and the core module
// only.
package benchkit

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/storetest"
)

var seq atomic.Int64

// uniq returns a key no other benchmark iteration uses.
func uniq(prefix string) string { return prefix + strconv.FormatInt(seq.Add(1), 36) }

// Result is one benchmark row.
type Result struct {
	NsPerOp     float64
	AllocsPerOp int64
	OpsPerCall  float64 // store operations per Do
	Heartbeats  float64 // heartbeats per Do
}

func result(r testing.BenchmarkResult, ops, beats int) Result {
	n := float64(r.N)
	return Result{
		NsPerOp: float64(r.T.Nanoseconds()) / n, AllocsPerOp: r.AllocsPerOp(),
		OpsPerCall: float64(ops) / n, Heartbeats: float64(beats) / n,
	}
}

// Fresh measures Do on keys never seen before: claim, fn, complete.
func Fresh(b *testing.B, s storekit.Store) (ops, beats int) {
	return fresh(b, s, "fresh-", func(context.Context) (int, error) { return 42, nil })
}

// Replay measures Do on a completed key: one claim that returns the record.
func Replay(b *testing.B, s storekit.Store) (ops, beats int) {
	return repeated(b, s, "replay-", func(context.Context) (int, error) { return 42, nil }, nil)
}

// fresh measures Do of fn on keys never seen before (named after prefix).
func fresh(b *testing.B, s storekit.Store, prefix string, fn func(context.Context) (int, error)) (ops, beats int) {
	inst := storetest.Instrument(s)
	g, err := idem.New[int](inst)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	prefix = uniq(prefix) + "-"
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := g.Do(ctx, prefix+strconv.Itoa(i), fn); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	report(b, inst)
	return inst.Total(), inst.Count(storetest.OpHeartbeat)
}

// repeated measures Do of fn on one key (named after name) after a first,
// untimed call; every call must end in want (nil: success).
func repeated(b *testing.B, s storekit.Store, name string, fn func(context.Context) (int, error), want error) (ops, beats int) {
	inst := storetest.Instrument(s)
	g, err := idem.New[int](inst)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	key := uniq(name)
	if _, err := g.Do(ctx, key, fn); !errors.Is(err, want) {
		b.Fatal(err)
	}
	inst.Reset()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := g.Do(ctx, key, fn); !errors.Is(err, want) {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	report(b, inst)
	return inst.Total(), inst.Count(storetest.OpHeartbeat)
}

// RawFresh performs what a fresh Do asks of the store (Claim, Complete)
// directly, without the Guard: the baseline for Fresh.
func RawFresh(b *testing.B, s storekit.Store) {
	ctx := context.Background()
	prefix := uniq("raw-")
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		key := storekit.StorageKeyPrefix + prefix + "-" + strconv.Itoa(i)
		nonce := strconv.Itoa(i) + "n"
		if _, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: nonce, LeaseTTL: time.Minute, TakeoverAfter: 30 * time.Second}); err != nil {
			b.Fatal(err)
		}
		if err := s.Complete(ctx, key, nonce, storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("42"), TTL: time.Hour}); err != nil {
			b.Fatal(err)
		}
	}
}

// RawReplay performs the one Claim of a replay directly: the baseline for
// Replay.
func RawReplay(b *testing.B, s storekit.Store) {
	ctx := context.Background()
	key := storekit.StorageKeyPrefix + uniq("rawreplay-")
	if _, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: "n", LeaseTTL: time.Minute, TakeoverAfter: time.Minute}); err != nil {
		b.Fatal(err)
	}
	if err := s.Complete(ctx, key, "n", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("42"), TTL: time.Hour}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: "other", LeaseTTL: time.Minute, TakeoverAfter: time.Minute}); err != nil {
			b.Fatal(err)
		}
	}
}

func report(b *testing.B, inst *storetest.Instrumented) {
	b.ReportMetric(float64(inst.Total())/float64(b.N), "storeops/op")
	b.ReportMetric(float64(inst.Count(storetest.OpHeartbeat))/float64(b.N), "heartbeats/op")
}

// Run runs f under testing.Benchmark and returns its row.
func Run(f func(b *testing.B) (ops, beats int)) Result {
	var ops, beats int
	r := testing.Benchmark(func(b *testing.B) { ops, beats = f(b) })
	return result(r, ops, beats)
}

// RunRaw runs a baseline under testing.Benchmark.
func RunRaw(f func(b *testing.B)) Result {
	r := testing.Benchmark(f)
	return result(r, 0, 0)
}
