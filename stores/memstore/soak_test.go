package memstore_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/storetest"
)

// TestSoakCleanup measures what the clean-up costs the calls beside it
// (run with IDEM_SOAK=1; IDEM_SOAK_RECORDS sets the count, default
// 1,000,000): it loads that many completed records with a 1 s TTL, expires
// them all at once (the store's clock jumps), and runs a probe of fresh
// and replayed calls through a Guard while the default clean-up removes
// them, until one second after the last is gone; then it runs the probe
// for an equal window with nothing to remove. It reports each window's
// p50, p99 and worst call and the heap before the load, loaded, and after
// the clean-up, and fails if the targets are missed: no call in
// the clean-up window slower than the worst call without it plus 100 ms,
// its p99 within 2× of the window without, the heap back within a few MB.
func TestSoakCleanup(t *testing.T) {
	if os.Getenv("IDEM_SOAK") == "" {
		t.Skip("set IDEM_SOAK=1 to run")
	}
	n := soakRecords(t)
	clock := newFakeClock() // stands still but for the jump that expires the load

	s := newStore(t, memstore.WithClock(clock.Now), memstore.WithRetention(0)) // default clean-up
	defer s.Close()
	g, err := idem.New[string](s)
	if err != nil {
		t.Fatal(err)
	}
	replayKeys := completeReplayKeys(t, g)
	heapBefore := measureHeap()
	loadStart := time.Now()
	loadExpiring(t, s, n)
	loaded := s.Len()
	heapLoaded := measureHeap()
	t.Logf("loaded %d records in %v", n, time.Since(loadStart).Round(time.Millisecond))

	var fresh atomic.Int64     // fresh calls made, each a record that stays
	var removedIn atomic.Int64 // how long the clean-up took to remove the load
	jump := time.Now()
	clock.Advance(time.Hour)
	busy := probe(t, g, replayKeys, &fresh, func() bool {
		if removedIn.Load() == 0 && s.Len() <= loaded-n+int(fresh.Load()) {
			removedIn.Store(int64(time.Since(jump)))
		}
		r := time.Duration(removedIn.Load())
		return (r > 0 && time.Since(jump) > r+time.Second) || time.Since(jump) > 5*time.Minute
	})
	window := time.Since(jump)
	quiet := probe(t, g, replayKeys, &fresh, func() bool { return time.Since(jump) > 2*window })
	heapAfter := measureHeap()

	t.Logf("window with clean-up (%v): %s", window.Round(time.Millisecond), busy)
	t.Logf("window without clean-up:   %s", quiet)
	t.Logf("clean-up removed %d records within %v of their expiry (interval %v, jittered)", n, time.Duration(removedIn.Load()).Round(time.Millisecond), memstore.DefaultCleanup)
	t.Logf("heap before the load %v, loaded %v, after the clean-up %v (%d records left)", heapBefore, heapLoaded, heapAfter, s.Len())
	if removedIn.Load() == 0 {
		t.Errorf("the clean-up did not remove the %d records within %v", n, window)
	}
	if busy.worst > quiet.worst+100*time.Millisecond {
		t.Errorf("worst call %v with clean-up, %v without: more than 100 ms longer", busy.worst, quiet.worst)
	}
	if busy.p99 > 2*quiet.p99 {
		t.Errorf("p99 %v with clean-up, %v without: more than 2×", busy.p99, quiet.p99)
	}
	// What stays is the probe's own records (fresh calls, about 400 bytes
	// each: 1 KB is allowed), not the load's.
	if extra, kept := heapAfter.alloc-heapBefore.alloc, float64(fresh.Load())/1024; extra > 8+kept {
		t.Errorf("%.1f MB more allocated after the clean-up than before the load, with %d fresh records kept", extra, fresh.Load())
	}
}

type heapStats struct{ alloc, inuse float64 }

// soakRecords is how many records the soak loads: IDEM_SOAK_RECORDS, by
// default a million.
func soakRecords(t *testing.T) int {
	n := 1_000_000
	if v := os.Getenv("IDEM_SOAK_RECORDS"); v != "" {
		if _, err := fmt.Sscan(v, &n); err != nil {
			t.Fatal(err)
		}
	}
	return n
}

// measureHeap returns the heap after two collections.
func measureHeap() heapStats {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return heapStats{alloc: mb(int64(ms.HeapAlloc)), inuse: mb(int64(ms.HeapInuse))}
}

// completeReplayKeys completes the keys of the calls the soak replays,
// for a day: they outlive the clock's jump.
func completeReplayKeys(t *testing.T, g *idem.Guard[string]) []string {
	replayKeys := make([]string, 1000)
	for i := range replayKeys {
		replayKeys[i] = fmt.Sprintf("replay-%d", i)
		if _, err := g.Do(context.Background(), replayKeys[i], func(context.Context) (string, error) { return "done", nil }); err != nil {
			t.Fatal(err)
		}
	}
	return replayKeys
}

// loadExpiring writes n completed records that expire within a second.
func loadExpiring(t *testing.T, s *memstore.Store, n int) {
	ctx := context.Background()
	for range n {
		key, nonce := storetest.NewKey(), storetest.NewNonce()
		if _, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: nonce, LeaseTTL: time.Second, TakeoverAfter: time.Second}); err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, key, nonce, storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`"ok"`), TTL: time.Second}); err != nil {
			t.Fatal(err)
		}
	}
}

func (h heapStats) String() string {
	return fmt.Sprintf("HeapAlloc %.1f MB, HeapInuse %.1f MB", h.alloc, h.inuse)
}

type probeStats struct {
	calls                 int
	p50, p99, p999, worst time.Duration
}

func (p probeStats) String() string {
	return fmt.Sprintf("%d calls, p50 %v, p99 %v, p99.9 %v, worst %v", p.calls, p.p50, p.p99, p.p999, p.worst)
}

// probe runs fresh calls in one goroutine and replays of replayKeys in
// another, each paced to about one call per 200 µs, until done (called
// every 10 ms from a third) returns true, and returns their latencies. It
// counts the fresh calls in fresh.
func probe(t *testing.T, g *idem.Guard[string], replayKeys []string, fresh *atomic.Int64, done func() bool) probeStats {
	t.Helper()
	var (
		mu   sync.Mutex
		lat  []time.Duration
		wg   sync.WaitGroup
		stop atomic.Bool
	)
	run := func(call func(i int) error) {
		defer wg.Done()
		var mine []time.Duration
		for i := 0; !stop.Load(); i++ {
			t0 := time.Now()
			if err := call(i); err != nil {
				t.Error(err)
				return
			}
			mine = append(mine, time.Since(t0))
			time.Sleep(200 * time.Microsecond)
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
	}
	ctx := context.Background()
	wg.Add(2)
	go run(func(int) error {
		_, err := g.Do(ctx, storetest.NewKey(), func(context.Context) (string, error) { return "fresh", nil })
		fresh.Add(1)
		return err
	})
	go run(func(i int) error {
		v, err := g.Do(ctx, replayKeys[i%len(replayKeys)], func(context.Context) (string, error) { return "ran again", nil })
		if err == nil && v != "done" {
			err = fmt.Errorf("replay ran fn: %q", v)
		}
		return err
	})
	for !done() {
		time.Sleep(10 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()
	slices.Sort(lat)
	q := func(f float64) time.Duration { return lat[min(len(lat)-1, int(f*float64(len(lat))))] }
	return probeStats{calls: len(lat), p50: q(0.50), p99: q(0.99), p999: q(0.999), worst: lat[len(lat)-1]}
}
