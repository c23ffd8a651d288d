package memstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/memstore"
)

// A Guard with a 400 ms threshold never takes over the live claim of a Guard
// with a 2 s threshold, however old the owner's heartbeat is by the short
// threshold: staleness is judged by the threshold stored with the claim.
// (With the caller's threshold, the short Guard took over at 1 s and fn ran
// twice.)
func TestShortThresholdDoesNotStealLiveClaim(t *testing.T) {
	now := atomic.Int64{}
	now.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli())
	s, err := memstore.New(memstore.WithClock(func() time.Time { return time.UnixMilli(now.Load()) }))
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	long, err := idem.New[int](s, idem.WithTakeoverAfter(2*time.Second), idem.WithHeartbeat(time.Second))
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	short, err := idem.New[int](s, idem.WithTakeoverAfter(400*time.Millisecond), idem.WithHeartbeat(100*time.Millisecond))
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	var runs atomic.Int32
	_, err = long.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
		runs.Add(1)
		now.Add(1000) // the owner's heartbeat is 1 s old: stale by 400 ms, live by 2 s
		_, err := short.Do(ctx, "k", func(ctx context.Context) (int, error) { runs.Add(1); return 2, nil })
		if !errors.Is(err, idem.ErrInProgress) {
			t.Errorf("short threshold: %v, want ErrInProgress", err)
		}
		return 1, nil
	})
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if got := runs.Load(); got != int32(1) {
		t.Errorf("fn ran once: got %v, want %v", got, int32(1))
	}
	v, err := short.Do(context.Background(), "k", func(ctx context.Context) (int, error) { runs.Add(1); return 2, nil })
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if v != 1 {
		t.Errorf("got %v, want %v", v, 1)
	}
}
