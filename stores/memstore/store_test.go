package memstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/storetest"
)

func newStore(t testing.TB, opts ...memstore.Option) *memstore.Store {
	t.Helper()
	s, err := memstore.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestOptions(t *testing.T) {
	for name, o := range map[string]memstore.Option{
		"nil option":         nil,
		"nil clock":          memstore.WithClock(nil),
		"negative retention": memstore.WithRetention(-time.Second),
		"nil logger":         memstore.WithLogger(nil),
	} {
		if _, err := memstore.New(o); !errors.Is(err, storekit.ErrInvalidOption) {
			t.Errorf("%s: got %v, want ErrInvalidOption", name, err)
		}
	}
	_, err := memstore.New(memstore.WithClock(nil), nil, memstore.WithRetention(-time.Second))
	storetest.CheckOptionErrors(t, err, "memstore.WithClock", "memstore.New", "memstore.WithRetention")
	if want := "idem: memstore.WithRetention: retention must not be negative, got -1s"; !strings.Contains(err.Error(), want) {
		t.Errorf("got %q, want it to contain %q", err, want)
	}
}

// TestBoundedMemory writes many distinct short-lived keys and checks that
// expired records are purged as claims go on, without calling Purge and
// without the clean-up goroutine.
func TestBoundedMemory(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	s := newStore(t, memstore.WithClock(clock), memstore.WithRetention(0), memstore.WithoutCleanup())
	ctx := context.Background()
	const n = 200_000
	peak := 0
	for i := 0; i < n; i++ {
		key, nonce := storetest.NewKey(), storetest.NewNonce()
		if _, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: nonce, LeaseTTL: time.Second, TakeoverAfter: time.Second}); err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, key, nonce, storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`1`), TTL: time.Second}); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Millisecond) // 1000 live records at any time
		peak = max(peak, s.Len())
	}
	if peak >= 3000 {
		t.Errorf("peak %d records; live ones are ~1000, expired ones must be purged", peak)
	}
	now = now.Add(time.Hour)
	if _, err := s.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	if s.Len() != 0 {
		t.Errorf("%d records left after Purge", s.Len())
	}
}

func TestRetentionKeepsAttempts(t *testing.T) {
	clock := newFakeClock()
	s := newStore(t, memstore.WithClock(clock.Now), memstore.WithoutCleanup()) // Purge counts the removal
	ctx := context.Background()
	key := storetest.NewKey()
	n1 := storetest.NewNonce()
	if _, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: n1, LeaseTTL: time.Second, TakeoverAfter: time.Second}); err != nil {
		t.Fatal(err)
	}
	if err := s.Release(ctx, key, n1); err != nil {
		t.Fatal(err)
	}
	clock.Advance(30 * time.Second)
	res, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: storetest.NewNonce(), LeaseTTL: time.Second, TakeoverAfter: time.Second})
	if err != nil || res.Record.Attempt != 2 {
		t.Fatalf("claim within the retention: %+v, %v", res.Record, err)
	}
	clock.Advance(2 * memstore.DefaultRetention)
	if n, err := s.Purge(ctx); n != 1 || err != nil {
		t.Fatalf("Purge: %d, %v", n, err)
	}
}

// TestWatchStop: stop frees the watch, and a change after it does not
// close the channel. The old stop function did nothing, so the watch
// stayed registered until the next change.
func TestWatchStop(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	key := storetest.NewKey()
	ch, stop, err := s.Watch(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if s.Watchers(key) != 1 {
		t.Fatalf("%d watchers, want 1", s.Watchers(key))
	}
	stop()
	stop() // a second stop is harmless
	if s.Watchers(key) != 0 {
		t.Fatalf("%d watchers after stop, want 0", s.Watchers(key))
	}
	if err := s.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ch:
		t.Fatal("a stopped watch was woken")
	default:
	}
}

// TestWatchContext: the end of the watch's context frees it, and a context
// that has already ended is refused. The old Watch ignored its context.
func TestWatchContext(t *testing.T) {
	s := newStore(t)
	key := storetest.NewKey()
	ctx, cancel := context.WithCancel(context.Background())
	if _, _, err := s.Watch(ctx, key); err != nil {
		t.Fatal(err)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for s.Watchers(key) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the watch outlived its context")
		}
		time.Sleep(time.Millisecond)
	}
	if _, _, err := s.Watch(ctx, key); !errors.Is(err, context.Canceled) {
		t.Fatalf("Watch with an ended context: %v", err)
	}
}

// TestWatchWakesEveryWatcher: two watches of one key both wake on a change.
func TestWatchWakesEveryWatcher(t *testing.T) {
	s := newStore(t)
	ctx := context.Background()
	key, nonce := storetest.NewKey(), storetest.NewNonce()
	a, stopA, _ := s.Watch(ctx, key)
	b, stopB, _ := s.Watch(ctx, key)
	defer stopA()
	defer stopB()
	if _, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: nonce, LeaseTTL: time.Second, TakeoverAfter: time.Second}); err != nil {
		t.Fatal(err)
	}
	for _, ch := range []<-chan struct{}{a, b} {
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatal("a watcher was not woken")
		}
	}
	if s.Watchers(key) != 0 {
		t.Fatalf("%d watchers left after the change", s.Watchers(key))
	}
}
