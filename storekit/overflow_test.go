package storekit_test

import (
	"context"
	"errors"
	"math"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"
)

// TestCleanupHugeInterval: a clean-up interval of math.MaxInt64 means
// rarely: no pass runs within a quarter second (a wait that wrapped
// negative would run passes back to back), and every wait drawn is long.
func TestCleanupHugeInterval(t *testing.T) {
	var passes atomic.Int64
	c := storekit.StartCleaner("test", math.MaxInt64, nil, func(context.Context) error {
		passes.Add(1)
		return nil
	})
	time.Sleep(250 * time.Millisecond)
	_ = c.Close()
	if n := passes.Load(); n != 0 {
		t.Fatalf("%d passes in 250ms with a clean-up interval of %v", n, time.Duration(math.MaxInt64))
	}
	for _, d := range []time.Duration{math.MaxInt64, math.MaxInt64 / 2, math.MaxInt64/2 + 1, time.Hour} {
		for range 1000 {
			if w := storekit.CleanupWait(d); w < d/2 {
				t.Fatalf("CleanupWait(%v) = %v, under half the interval", d, w)
			}
		}
	}
}

// TestCleanupIntervalValidated: an interval under a millisecond (zero,
// negative, a nanosecond) is an invalid option; a huge one is accepted.
func TestCleanupIntervalValidated(t *testing.T) {
	for _, d := range []time.Duration{0, -time.Second, time.Nanosecond, math.MinInt64} {
		o := storekit.Options{Store: "test"}
		o.SetCleanup(d)
		if err := o.Err(); !errors.Is(err, storekit.ErrInvalidOption) {
			t.Errorf("SetCleanup(%v): %v, want ErrInvalidOption", d, err)
		}
	}
	o := storekit.Options{Store: "test"}
	o.SetCleanup(math.MaxInt64)
	if err := o.Err(); err != nil || o.Cleanup != math.MaxInt64 {
		t.Errorf("SetCleanup(MaxInt64): %v, %v", err, o.Cleanup)
	}
}

// TestDurationArithmeticSaturates: sums and products of durations from
// options saturate instead of wrapping, and a Pacer with a huge or NaN
// ratio does not return at once from what should be a long sleep (or
// sleep for a NaN).
func TestDurationArithmeticSaturates(t *testing.T) {
	if got := storekit.AddDuration(math.MaxInt64, time.Second); got != math.MaxInt64 {
		t.Errorf("AddDuration(max, 1s) = %v", got)
	}
	if got := storekit.AddDuration(math.MinInt64, -time.Second); got != math.MinInt64 {
		t.Errorf("AddDuration(min, -1s) = %v", got)
	}
	if got := storekit.AddDuration(time.Second, time.Second); got != 2*time.Second {
		t.Errorf("AddDuration(1s, 1s) = %v", got)
	}
	if got := storekit.ScaleDuration(time.Hour, 1e300); got != math.MaxInt64 {
		t.Errorf("ScaleDuration(1h, 1e300) = %v", got)
	}
	if got := storekit.ScaleDuration(time.Hour, math.NaN()); got != 0 {
		t.Errorf("ScaleDuration(1h, NaN) = %v", got)
	}

	p := storekit.Pacer{Ratio: 1e300}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_ = p.Rest(ctx)
	time.Sleep(time.Millisecond)
	start := time.Now()
	if err := p.Rest(ctx); err == nil || time.Since(start) < 50*time.Millisecond {
		t.Errorf("Pacer with a huge ratio returned %v after %v, want a sleep cut off by the context", err, time.Since(start))
	}
	nan := storekit.Pacer{Ratio: math.NaN()}
	_ = nan.Rest(context.Background())
	time.Sleep(time.Millisecond)
	start = time.Now()
	if err := nan.Rest(context.Background()); err != nil || time.Since(start) > 50*time.Millisecond {
		t.Errorf("Pacer with a NaN ratio: %v after %v", err, time.Since(start))
	}
}
