package memstore_test

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/storetest"
)

// fakeClock is a store clock the test moves by hand.
type fakeClock struct{ ms atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ms.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

// claimN claims n fresh keys for lease and returns them.
func claimN(t testing.TB, s *memstore.Store, n int, lease time.Duration) []string {
	t.Helper()
	ctx := context.Background()
	keys := make([]string, n)
	for i := range keys {
		keys[i] = storetest.NewKey()
		if _, err := s.Claim(ctx, storekit.ClaimRequest{Key: keys[i], Nonce: storetest.NewNonce(), LeaseTTL: lease, TakeoverAfter: lease}); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

// waitFor polls cond until it holds. The deadline only ends a test that
// would otherwise hang; what the test checks is decided by counts.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// waitPasses waits until s's clean-up goroutine has finished n more passes
// than it had when called: the last of them started after the call.
func waitPasses(t testing.TB, s *memstore.Store, n int64) {
	t.Helper()
	from := s.CleanupPasses()
	waitFor(t, "clean-up passes", func() bool { return s.CleanupPasses() >= from+n })
}

func TestCleanupOptions(t *testing.T) {
	for name, o := range map[string]memstore.Option{
		"zero interval":     memstore.WithCleanup(0),
		"negative interval": memstore.WithCleanup(-time.Second),
	} {
		_, err := memstore.New(o)
		if !errors.Is(err, storekit.ErrInvalidOption) {
			t.Errorf("%s: got %v, want ErrInvalidOption", name, err)
			continue
		}
		storetest.CheckOptionErrors(t, err, "memstore.WithCleanup")
	}
	for name, c := range map[string]struct {
		opts []memstore.Option
		want bool
	}{
		"default":                      {nil, true},
		"WithoutCleanup":               {[]memstore.Option{memstore.WithoutCleanup()}, false},
		"WithCleanup, WithoutCleanup":  {[]memstore.Option{memstore.WithCleanup(time.Minute), memstore.WithoutCleanup()}, false},
		"WithoutCleanup, WithCleanup":  {[]memstore.Option{memstore.WithoutCleanup(), memstore.WithCleanup(time.Minute)}, true},
		"WithCleanup on its own":       {[]memstore.Option{memstore.WithCleanup(time.Hour)}, true},
		"WithoutCleanup with a clock":  {[]memstore.Option{memstore.WithClock(time.Now), memstore.WithoutCleanup()}, false},
		"WithRetention keeps clean-up": {[]memstore.Option{memstore.WithRetention(0)}, true},
	} {
		s := newStore(t, c.opts...)
		if got := s.Cleaning(); got != c.want {
			t.Errorf("%s: cleaning %v, want %v", name, got, c.want)
		}
		if err := s.Close(); err != nil {
			t.Errorf("%s: Close: %v", name, err)
		}
	}
}

// TestCleanupWithoutWrites: an open store removes expired records by
// itself, with no write and no Purge, and leaves live ones. (Before the
// clean-up goroutine, a store removed records only on writes and Purge:
// all 5,000 stayed.)
func TestCleanupWithoutWrites(t *testing.T) {
	clock := newFakeClock()
	s := newStore(t, memstore.WithClock(clock.Now), memstore.WithRetention(0), memstore.WithCleanup(5*time.Millisecond))
	defer s.Close()
	claimN(t, s, 5000, time.Second)
	live := claimN(t, s, 100, 24*time.Hour)
	clock.Advance(time.Hour)
	waitPasses(t, s, 2)
	if got := s.Len(); got != len(live) {
		t.Fatalf("%d records left after clean-up passes, want the %d live ones", got, len(live))
	}
	for _, k := range live {
		if _, err := s.Get(context.Background(), k); err != nil {
			t.Fatalf("a live record was removed: %v", err)
		}
	}
}

// TestWithoutCleanup: WithoutCleanup runs no pass, while a store with a
// clean-up beside it has run several; Purge then removes the records.
func TestWithoutCleanup(t *testing.T) {
	clock := newFakeClock()
	control := newStore(t, memstore.WithClock(clock.Now), memstore.WithRetention(0), memstore.WithCleanup(time.Millisecond))
	defer control.Close()
	s := newStore(t, memstore.WithClock(clock.Now), memstore.WithRetention(0), memstore.WithoutCleanup())
	defer s.Close()
	claimN(t, control, 1000, time.Second)
	claimN(t, s, 1000, time.Second)
	clock.Advance(time.Hour)
	waitPasses(t, control, 3)
	if control.Len() != 0 {
		t.Fatalf("control store holds %d records after its clean-up", control.Len())
	}
	if s.Len() != 1000 || s.CleanupPasses() != 0 {
		t.Fatalf("WithoutCleanup: %d records, %d passes; want 1000 records, no pass", s.Len(), s.CleanupPasses())
	}
	if n, err := s.Purge(context.Background()); n != 1000 || err != nil {
		t.Fatalf("Purge: %d, %v", n, err)
	}
}

// TestCloseStopsCleanup: Close ends the clean-up goroutine (the goroutine
// count falls back, and no pass runs after it), may be called again, and
// leaves the store usable.
func TestCloseStopsCleanup(t *testing.T) {
	const n = 50
	// Goroutines that earlier tests left ending (a timer's callback, a
	// request in flight) must not count: wait until the count holds still.
	before := runtime.NumGoroutine()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		now := runtime.NumGoroutine()
		if now == before {
			break
		}
		before = now
	}
	stores := make([]*memstore.Store, n)
	for i := range stores {
		stores[i] = newStore(t, memstore.WithCleanup(time.Millisecond))
	}
	if got := runtime.NumGoroutine(); got < before+n {
		t.Fatalf("%d goroutines with %d open stores, %d before: want one each", got, n, before)
	}
	for _, s := range stores {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "goroutines to end", func() bool { return runtime.NumGoroutine() < before+n/2 })
	runtime.KeepAlive(stores) // ended by Close, not by the stores' collection

	clock := newFakeClock()
	s := newStore(t, memstore.WithClock(clock.Now), memstore.WithRetention(0), memstore.WithCleanup(time.Millisecond))
	control := newStore(t, memstore.WithCleanup(time.Millisecond))
	defer control.Close()
	waitPasses(t, s, 1)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	passes := s.CleanupPasses()
	claimN(t, s, 100, time.Second) // usable after Close
	clock.Advance(time.Hour)
	waitPasses(t, control, 3)
	if got := s.CleanupPasses(); got != passes {
		t.Fatalf("%d passes after Close", got-passes)
	}
	if s.Len() != 100 {
		t.Fatalf("%d records: removed without a clean-up", s.Len())
	}
	if n, err := s.Purge(context.Background()); n != 100 || err != nil {
		t.Fatalf("Purge after Close: %d, %v", n, err)
	}
}

// TestDroppedStoreStopsCleanup: a store dropped without Close does not
// keep its goroutine (and so its records) forever.
func TestDroppedStoreStopsCleanup(t *testing.T) {
	const n = 50
	before := runtime.NumGoroutine()
	for range n {
		s := newStore(t, memstore.WithCleanup(time.Millisecond))
		claimN(t, s, 10, time.Hour)
	}
	waitFor(t, "dropped stores' goroutines to end", func() bool {
		runtime.GC()
		return runtime.NumGoroutine() < before+n/2
	})
}

// TestPurgeDoesNotBlockClaims: a claim made while Purge removes 200,000
// expired records waits for one batch, not for the whole purge. With the
// whole purge under one hold of the mutex, the longest claim waited about
// as long as the purge (ratio ~1.0); the bound is a third of it.
func TestPurgeDoesNotBlockClaims(t *testing.T) {
	const n = 200_000
	var ratios []float64
	for attempt := range 3 {
		worst, purge, claims := purgeBesideClaims(t, n)
		ratio := float64(worst) / float64(purge)
		t.Logf("attempt %d: Purge of %d took %v; %d claims beside it, the longest %v (%.3f of the purge)", attempt, n, purge, claims, worst, ratio)
		if ratio < 1.0/3 && claims >= 10 {
			return
		}
		ratios = append(ratios, ratio)
	}
	t.Fatalf("a claim waited for most of the purge in every attempt: ratios %v", ratios)
}

// purgeBesideClaims loads n expired records, purges them while a goroutine
// claims fresh keys, and returns the longest claim during the purge, the
// purge's duration and how many claims ran during it.
func purgeBesideClaims(t *testing.T, n int) (worst, purge time.Duration, claims int) {
	clock := newFakeClock()
	s := newStore(t, memstore.WithClock(clock.Now), memstore.WithRetention(0), memstore.WithoutCleanup())
	claimN(t, s, n, time.Second)
	clock.Advance(time.Hour)

	var (
		stop    atomic.Bool
		started = make(chan struct{})
		wg      sync.WaitGroup
		spans   [][2]time.Time
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		ctx := context.Background()
		for i := 0; !stop.Load(); i++ {
			t0 := time.Now()
			_, err := s.Claim(ctx, storekit.ClaimRequest{Key: storetest.NewKey(), Nonce: storetest.NewNonce(), LeaseTTL: time.Hour, TakeoverAfter: time.Hour})
			spans = append(spans, [2]time.Time{t0, time.Now()})
			if err != nil {
				t.Error(err)
				return
			}
			if i == 0 {
				close(started)
			}
		}
	}()
	<-started
	p0 := time.Now()
	removed, err := s.Purge(context.Background())
	p1 := time.Now()
	stop.Store(true)
	wg.Wait()
	if err != nil || removed == 0 {
		t.Fatalf("Purge: %d, %v", removed, err)
	}
	if s.Len() != len(spans) {
		// The claims' writes removed the rest of the n, 16 each.
		t.Fatalf("%d records after the purge, want the %d claimed beside it", s.Len(), len(spans))
	}
	for _, sp := range spans {
		if sp[1].After(p0) && sp[0].Before(p1) { // overlaps the purge
			claims++
			worst = max(worst, sp[1].Sub(sp[0]))
		}
	}
	return worst, p1.Sub(p0), claims
}

// TestHeapReturnsToBaseline: once 300,000 records have expired and the
// clean-up ran, the heap is back within a few MB of what it was before
// they were written. (With maps and heap arrays that never shrink, 20 MB
// stayed held after the clean-up.)
func TestHeapReturnsToBaseline(t *testing.T) {
	const n = 300_000
	const slack = 4 << 20
	clock := newFakeClock()
	heapInuse := func() int64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapInuse)
	}
	s := newStore(t, memstore.WithClock(clock.Now), memstore.WithRetention(0), memstore.WithCleanup(5*time.Millisecond))
	defer s.Close()
	base := heapInuse()
	claimN(t, s, n, time.Second)
	peak := heapInuse()
	clock.Advance(time.Hour)
	waitPasses(t, s, 2)
	after := heapInuse()
	t.Logf("HeapInuse: %.1f MB before, %.1f MB with %d records, %.1f MB after the clean-up", mb(base), mb(peak), n, mb(after))
	if s.Len() != 0 {
		t.Fatalf("%d records left", s.Len())
	}
	if after-base > slack {
		t.Fatalf("the clean-up left %.1f MB held (%.1f MB before, %.1f MB after); want within %.0f MB", mb(after-base), mb(base), mb(after), mb(slack))
	}
	runtime.KeepAlive(s)
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }
