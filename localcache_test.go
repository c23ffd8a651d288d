package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/benchkit"
	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/storetest"
)

// cacheGuard returns a Guard with a local cache over an instrumented
// memstore, and the instrumented store.
func cacheGuard(t testing.TB, entries int, maxAge time.Duration, opts ...idem.Option) (*idem.Guard[int], *storetest.Instrumented) {
	t.Helper()
	inst := storetest.Instrument(mustMem())
	g, err := idem.New[int](inst, append([]idem.Option{idem.WithLocalCache(entries, maxAge)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return g, inst
}

func counting(n *atomic.Int64, v int) func(context.Context) (int, error) {
	return func(context.Context) (int, error) { n.Add(1); return v, nil }
}

// doOps calls g.Do and returns its result, how many store operations it
// cost, and its error.
func doOps(t *testing.T, g *idem.Guard[int], inst *storetest.Instrumented, key string, fn func(context.Context) (int, error), opts ...idem.CallOption) (int, int, error) {
	t.Helper()
	before := inst.Total()
	v, err := g.Do(context.Background(), key, fn, opts...)
	return v, inst.Total() - before, err
}

func TestLocalCacheInvalidOptions(t *testing.T) {
	for _, c := range []struct {
		entries int
		maxAge  time.Duration
	}{{0, time.Minute}, {-1, time.Minute}, {10, 0}, {10, -time.Second}} {
		if _, err := idem.New[int](mustMem(), idem.WithLocalCache(c.entries, c.maxAge)); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("WithLocalCache(%d, %v): err = %v, want ErrInvalidOption", c.entries, c.maxAge, err)
		}
	}
}

func TestLocalCacheWarmReplayCostsNoRoundTrip(t *testing.T) {
	var c eventCounter
	g, inst := cacheGuard(t, 100, time.Hour, idem.WithObserver(c.Observe))
	var runs atomic.Int64
	fn := counting(&runs, 7)
	if _, ops, _ := doOps(t, g, inst, "k", fn); ops != 2 {
		t.Fatalf("fresh call: %d store ops, want 2", ops)
	}
	// The owner's own completion is not cached; the first replay reads the
	// store once and fills the cache.
	if v, ops, err := doOps(t, g, inst, "k", fn); err != nil || v != 7 || ops != 1 {
		t.Fatalf("first replay: %v, %v, %d ops; want 7, nil, 1", v, err, ops)
	}
	inst.Reset()
	const n = 100
	for range n {
		if v, err := g.Do(context.Background(), "k", fn); err != nil || v != 7 {
			t.Fatalf("cached replay: %v, %v", v, err)
		}
	}
	if ops := inst.Total(); ops != 0 {
		t.Fatalf("%d warm replays cost %d store ops, want 0", n, ops)
	}
	if runs.Load() != 1 {
		t.Fatalf("fn ran %d times", runs.Load())
	}
	if hits := c.Count(idem.EventHit); hits != n+1 {
		t.Fatalf("observer saw %d hits, want %d", hits, n+1)
	}
}

func TestLocalCacheNotServedPastExpiry(t *testing.T) {
	for _, skew := range []time.Duration{0, time.Hour} {
		t.Run("store clock ahead by "+skew.String(), func(t *testing.T) {
			// A store whose clock runs ahead of ours, as a server's may: by
			// the local clock the record has an hour more to live, but it
			// expires 150ms after its completion, and the cache must not
			// serve it longer than that.
			inst := storetest.Instrument(mustMem(memstore.WithClock(func() time.Time { return time.Now().Add(skew) })))
			g, err := idem.New[int](inst, idem.WithTTL(150*time.Millisecond), idem.WithLocalCache(10, time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			var runs atomic.Int64
			fn := counting(&runs, 1)
			doOps(t, g, inst, "k", fn)
			doOps(t, g, inst, "k", fn) // fills the cache
			time.Sleep(200 * time.Millisecond)
			if _, ops, _ := doOps(t, g, inst, "k", fn); ops == 0 {
				t.Fatal("expired record served from the cache")
			}
			if runs.Load() != 2 {
				t.Fatalf("fn ran %d times, want 2 (the record had expired)", runs.Load())
			}
		})
	}
}

func TestLocalCacheMaxAge(t *testing.T) {
	g, inst := cacheGuard(t, 10, 100*time.Millisecond)
	var runs atomic.Int64
	fn := counting(&runs, 1)
	doOps(t, g, inst, "k", fn)
	doOps(t, g, inst, "k", fn) // fills the cache
	time.Sleep(150 * time.Millisecond)
	if _, ops, err := doOps(t, g, inst, "k", fn); err != nil || ops != 1 {
		t.Fatalf("replay after maxAge: %v, %d ops; want a store read", err, ops)
	}
	if _, ops, err := doOps(t, g, inst, "k", fn); err != nil || ops != 0 {
		t.Fatalf("replay after refill: %v, %d ops; want 0", err, ops)
	}
	if runs.Load() != 1 {
		t.Fatalf("fn ran %d times", runs.Load())
	}
}

func TestLocalCacheBounded(t *testing.T) {
	g, inst := cacheGuard(t, 2, time.Hour)
	var runs atomic.Int64
	fn := counting(&runs, 1)
	for _, k := range []string{"a", "b", "c"} {
		doOps(t, g, inst, k, fn)
		doOps(t, g, inst, k, fn) // cache it; "a" is evicted by "c"
	}
	if _, ops, _ := doOps(t, g, inst, "c", fn); ops != 0 {
		t.Fatalf("c: %d ops, want 0 (cached)", ops)
	}
	if _, ops, _ := doOps(t, g, inst, "b", fn); ops != 0 {
		t.Fatalf("b: %d ops, want 0 (cached)", ops)
	}
	if _, ops, _ := doOps(t, g, inst, "a", fn); ops != 1 {
		t.Fatalf("a: %d ops, want 1 (evicted, least recently used)", ops)
	}
	// Reading a back evicted c, the least recently used now.
	if _, ops, _ := doOps(t, g, inst, "c", fn); ops != 1 {
		t.Fatalf("c after a came back: %d ops, want 1", ops)
	}
}

func TestLocalCacheNeverCachesInProgress(t *testing.T) {
	store := mustMem()
	owner, err := idem.New[int](store)
	if err != nil {
		t.Fatal(err)
	}
	inst := storetest.Instrument(store)
	g, err := idem.New[int](inst, idem.WithLocalCache(10, time.Hour)) // another "process"
	if err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := owner.Do(context.Background(), "k", func(context.Context) (int, error) {
			close(started)
			<-release
			return 5, nil
		})
		done <- err
	}()
	<-started
	var runs atomic.Int64
	for i := range 3 {
		if _, ops, err := doOps(t, g, inst, "k", counting(&runs, 0)); !errors.Is(err, idem.ErrInProgress) || ops != 1 {
			t.Fatalf("duplicate %d of a live call: %v, %d ops; want ErrInProgress from the store", i, err, ops)
		}
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v, ops, err := doOps(t, g, inst, "k", counting(&runs, 0)); err != nil || v != 5 || ops != 1 {
		t.Fatalf("after completion: %v, %v, %d ops; want 5 from the store", v, err, ops)
	}
	if runs.Load() != 0 {
		t.Fatal("fn ran in the duplicate")
	}
}

func TestLocalCacheLockFailureCached(t *testing.T) {
	g, inst := cacheGuard(t, 10, time.Hour, idem.OnFailure(idem.Lock))
	var runs atomic.Int64
	fn := func(context.Context) (int, error) { runs.Add(1); return 0, errors.New("card declined") }
	doOps(t, g, inst, "k", fn)
	if _, ops, err := doOps(t, g, inst, "k", fn); !errors.Is(err, idem.ErrPreviousFailure) || ops != 1 {
		t.Fatalf("first replay: %v, %d ops", err, ops)
	}
	_, ops, err := doOps(t, g, inst, "k", fn)
	var se *idem.RecordedFailure
	if !errors.As(err, &se) || se.Message != "card declined" || ops != 0 {
		t.Fatalf("cached replay: %v, %d ops; want the stored failure with 0 ops", err, ops)
	}
	if runs.Load() != 1 {
		t.Fatalf("fn ran %d times", runs.Load())
	}
}

func TestLocalCacheUnlockFailureNotCached(t *testing.T) {
	g, inst := cacheGuard(t, 10, time.Hour) // OnFailure(Unlock), the default
	var runs atomic.Int64
	fn := func(context.Context) (int, error) { runs.Add(1); return 0, errors.New("try again") }
	for i := range 3 {
		if _, ops, err := doOps(t, g, inst, "k", fn); err == nil || ops != 2 {
			t.Fatalf("call %d: %v, %d ops; want fn's error after claim and release", i, err, ops)
		}
	}
	if runs.Load() != 3 {
		t.Fatalf("fn ran %d times, want 3 (a released failure is run again)", runs.Load())
	}
}

func TestLocalCachePayloadMismatch(t *testing.T) {
	var c eventCounter
	g, inst := cacheGuard(t, 10, time.Hour, idem.WithObserver(c.Observe))
	var runs atomic.Int64
	fn := counting(&runs, 3)
	doOps(t, g, inst, "k", fn, idem.Payload("a"))
	doOps(t, g, inst, "k", fn, idem.Payload("a")) // fills the cache
	if _, ops, err := doOps(t, g, inst, "k", fn, idem.Payload("b")); !errors.Is(err, idem.ErrPayloadMismatch) || ops != 0 {
		t.Fatalf("other payload: %v, %d ops; want ErrPayloadMismatch from the cache", err, ops)
	}
	if _, ops, err := doOps(t, g, inst, "k", fn); !errors.Is(err, idem.ErrPayloadMismatch) || ops != 0 {
		t.Fatalf("no payload: %v, %d ops; want ErrPayloadMismatch from the cache", err, ops)
	}
	if v, ops, err := doOps(t, g, inst, "k", fn, idem.Payload("a")); err != nil || v != 3 || ops != 0 {
		t.Fatalf("same payload: %v, %v, %d ops", v, err, ops)
	}
	if n := c.Count(idem.EventPayloadMismatch); n != 2 {
		t.Fatalf("observer saw %d mismatches, want 2", n)
	}
}

// TestLocalCacheCoalescesMisses: concurrent replays of a completed key that
// is not cached yet share one store read, and later ones hit the cache.
func TestLocalCacheCoalescesMisses(t *testing.T) {
	store := mustMem()
	owner, err := idem.New[int](store)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := owner.Do(context.Background(), "k", func(context.Context) (int, error) { return 9, nil }); err != nil {
		t.Fatal(err)
	}
	inst := storetest.Instrument(store)
	inst.Before = func(ctx context.Context, op storetest.Op, key string) error {
		time.Sleep(20 * time.Millisecond) // a slow store, so callers pile up
		return nil
	}
	g, err := idem.New[int](inst, idem.WithLocalCache(10, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	const n = 32
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, n)
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			v, err := g.Do(context.Background(), "k", func(context.Context) (int, error) { return 0, errors.New("ran") })
			if err == nil && v != 9 {
				err = errors.New("wrong value")
			}
			errs <- err
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if c := inst.Total(); c != 1 {
		t.Fatalf("%d concurrent replays made %d store reads, want 1", n, c)
	}
}

// BenchmarkReplayLocalCache compares a replay served by the local cache with
// a bare in-memory map lookup (plus decoding the result, which any cache of
// encoded outcomes must do) and with memstore without the cache.
func BenchmarkReplayLocalCache(b *testing.B) {
	b.Run("cache-warm", func(b *testing.B) {
		g, inst := cacheGuard(b, 1024, time.Hour)
		ctx := context.Background()
		fn := func(context.Context) (int, error) { return 42, nil }
		for range 2 {
			if _, err := g.Do(ctx, "replay-key", fn); err != nil {
				b.Fatal(err)
			}
		}
		inst.Reset()
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			if _, err := g.Do(ctx, "replay-key", fn); err != nil {
				b.Fatal(err)
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(inst.Total())/float64(b.N), "storeops/op")
	})
	b.Run("raw-map", func(b *testing.B) {
		var mu sync.Mutex
		m := map[string][]byte{"replay-key": []byte("42")}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			mu.Lock()
			r := m["replay-key"]
			mu.Unlock()
			var v int
			if err := json.Unmarshal(r, &v); err != nil || v != 42 {
				b.Fatal(v, err)
			}
		}
	})
	b.Run("memstore-nocache", func(b *testing.B) { benchkit.Replay(b, mustMem()) })
}

// TestLocalCacheNoSecondReadAfterFlight: a replay that missed the cache just
// as the flight filling it ended reads the cache again, not the store. Many
// short rounds with no store delay, so callers land on every side of the
// flight's end.
func TestLocalCacheNoSecondReadAfterFlight(t *testing.T) {
	store := mustMem()
	owner, err := idem.New[int](store)
	if err != nil {
		t.Fatal(err)
	}
	inst := storetest.Instrument(store)
	g, err := idem.New[int](inst, idem.WithLocalCache(1000, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const rounds, n = 300, 8
	for r := range rounds {
		key := "k" + strconv.Itoa(r)
		if _, err := owner.Do(ctx, key, func(context.Context) (int, error) { return r, nil }); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		for range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if v, err := g.Do(ctx, key, func(context.Context) (int, error) { return -1, nil }); err != nil || v != r {
					t.Errorf("replay: %v, %v", v, err)
				}
			}()
		}
		wg.Wait()
	}
	if c := inst.Total(); c != rounds {
		t.Fatalf("%d rounds of %d concurrent replays made %d store reads, want %d", rounds, n, c, rounds)
	}
}
