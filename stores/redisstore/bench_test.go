package redisstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/redisstore/internal/redisbench"
	"github.com/redis/go-redis/v9"
)

// benchKinds are the servers the benchmarks run on: Redis 7.0, where a
// fresh call completes with the complete script, and Valkey 8.1, where it
// completes with SET ... IFEQ.
var benchKinds = []string{"standalone", "valkey"}

// benchSetup returns a Setup on two clients of the standalone server of
// kind, with the benchmarks' pool size.
func benchSetup(b *testing.B, kind string) *redisbench.Setup {
	b.Helper()
	addr := dial(b, kind).(*redis.Client).Options().Addr
	gc, rc := redisbench.NewClient(addr), redisbench.NewClient(addr)
	b.Cleanup(func() { _ = gc.Close(); _ = rc.Close() })
	s, err := redisbench.NewSetup(context.Background(), gc, rc)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

func report(b *testing.B, p redisbench.Pair) {
	b.ReportMetric(p.GuardOps, "guard-calls/s")
	b.ReportMetric(p.RawOps, "raw-calls/s")
	b.ReportMetric(p.Ratio(), "guard/raw")
}

// BenchmarkFresh compares guarded fresh calls (claim + complete, 2 round
// trips) with raw SET NX PX + SET, 64 goroutines each, in one run, on each
// of benchKinds.
func BenchmarkFresh(b *testing.B) {
	for _, kind := range benchKinds {
		b.Run(kind, func(b *testing.B) {
			s := benchSetup(b, kind)
			ctx := context.Background() // NewSetup's LoadScripts read the server's version and clock
			p, err := redisbench.Compare(ctx, "fresh", max(b.N, 256), 3, s.GuardFresh, s.RawFresh)
			if err != nil {
				b.Fatal(err)
			}
			report(b, p)
		})
	}
}

// BenchmarkReplay compares guarded replays of completed keys (1 round trip)
// with raw GET, 64 goroutines each, in one run, on each of benchKinds.
func BenchmarkReplay(b *testing.B) {
	for _, kind := range benchKinds {
		b.Run(kind, func(b *testing.B) {
			s := benchSetup(b, kind)
			ctx := context.Background()
			if err := s.PrepareReplays(ctx); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			p, err := redisbench.Compare(ctx, "replay", max(b.N, 256), 3, s.GuardReplay, s.RawReplay)
			if err != nil {
				b.Fatal(err)
			}
			report(b, p)
		})
	}
}

// BenchmarkWakeup reports how long after the owner finishes a waiter in
// another Guard returns: woken by the store's publish, or by polling.
func BenchmarkWakeup(b *testing.B) {
	addr := testenv.RedisAddr(b)
	for _, mode := range []string{"push", "poll"} {
		b.Run(mode, func(b *testing.B) {
			owner, waiter := redisbench.NewClient(addr), redisbench.NewClient(addr)
			defer owner.Close()
			defer waiter.Close()
			lat, err := redisbench.WakeLatency(context.Background(), owner, waiter, mode == "poll", b.N, 30*time.Second)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(redisbench.Median(lat).Microseconds()), "wake-µs(median)")
		})
	}
}

// BenchmarkCall runs one call at a time, so allocs/op and a CPU profile
// show the client's own work per call: a guarded replay and fresh call,
// and the raw GET and SET NX PX + SET they are held against.
func BenchmarkCall(b *testing.B) {
	s := benchSetup(b, "standalone")
	ctx := context.Background()
	if err := s.PrepareReplays(ctx); err != nil {
		b.Fatal(err)
	}
	fn := func(context.Context) (redisbench.Invoice, error) {
		return redisbench.Invoice{ID: "inv_0123456789", Amount: 4200}, nil
	}
	raw := s.Raw
	prefix := redisbench.RandPrefix()
	var n int
	next := func() string { n++; return prefix + strconv.Itoa(n) }
	gk := prefix + "get"
	if err := raw.Set(ctx, gk, `{"ID":"inv_0123456789","Amount":4200}`, time.Minute).Err(); err != nil {
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		run  func() error
	}{
		{"replay", func() error { _, err := s.Guard.Do(ctx, "replay-0", fn); return err }},
		{"raw-GET", func() error { return raw.Get(ctx, gk).Err() }},
		{"fresh", func() error { _, err := s.Guard.Do(ctx, next(), fn); return err }},
		{"raw-SET-NX-PX+SET", func() error {
			k := next()
			if err := raw.SetNX(ctx, k, "in_progress", 30*time.Second).Err(); err != nil {
				return err
			}
			return raw.Set(ctx, k, "v", time.Minute).Err()
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if err := c.run(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
