package idem_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/storetest"
)

var (
	secretOld = []byte("rotation-test-secret-old")
	secretNew = []byte("rotation-test-secret-new")
)

// TestWithSecretInvalid: bad secrets are option errors, and one argument
// still compiles.
func TestWithSecretInvalid(t *testing.T) {
	s := mustMem()
	for _, tc := range []struct {
		name string
		opt  idem.Option
	}{
		{"empty active", idem.WithSecret(nil)},
		{"empty previous", idem.WithSecret(secretNew, nil)},
		{"previous is active", idem.WithSecret(secretNew, secretNew)},
		{"previous twice", idem.WithSecret(secretNew, secretOld, secretOld)},
	} {
		if _, err := idem.New[string](s, tc.opt); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", tc.name, err)
		}
	}
	if _, err := idem.New[string](s, idem.WithSecret(secretNew), idem.RequireSecret()); err != nil {
		t.Errorf("one secret: %v", err)
	}
}

// TestRotationWaitHoldsClaim: a Guard rotated to (new, old) whose new key
// sorts first waits, under Wait, for a call running under the old secret
// while holding its own claim, and heartbeats it (after five takeover
// thresholds its claim is in progress, refreshed since it was made, at
// attempt 1), and the wait ends with the old call's result.
func TestRotationWaitHoldsClaim(t *testing.T) {
	ctx := context.Background()
	s := storetest.Instrument(mustMem())
	timing := []idem.Option{idem.WithHeartbeat(20 * time.Millisecond), idem.WithTakeoverAfter(100 * time.Millisecond)}
	gOld, err := idem.New[string](s.AsStore(), append(timing, idem.WithSecret(secretOld))...)
	if err != nil {
		t.Fatal(err)
	}
	gWait, err := idem.New[string](s.AsStore(), append(timing, idem.WithSecret(secretNew, secretOld), idem.OnDuplicate(idem.Wait))...)
	if err != nil {
		t.Fatal(err)
	}
	key := ""
	for i := 0; key == ""; i++ {
		k := fmt.Sprint("hold-", i)
		if storageKey(t, gWait, k) < storageKey(t, gOld, k) {
			key = k
		}
	}
	skNew := storageKey(t, gWait, key)
	var runs atomic.Int64
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := gOld.Do(ctx, key, func(context.Context) (string, error) {
			runs.Add(1)
			close(started)
			<-release
			return "old", nil
		})
		done <- err
	}()
	<-started
	waited := make(chan string, 1)
	go func() {
		v, err := gWait.Do(ctx, key, func(context.Context) (string, error) { runs.Add(1); return "new", nil })
		if err != nil {
			v = err.Error()
		}
		waited <- v
	}()
	time.Sleep(500 * time.Millisecond) // five takeover thresholds
	rec, err := s.Get(ctx, skNew)
	if err != nil || rec.Status != storekit.StatusInProgress {
		t.Fatalf("the waiting caller's claim: %+v, %v; want it held", rec, err)
	}
	if rec.HeartbeatAt <= rec.StartedAt || rec.Attempt != 1 {
		t.Errorf("the waiting caller's claim: heartbeat at %d, started at %d, attempt %d; want it refreshed, never taken over", rec.HeartbeatAt, rec.StartedAt, rec.Attempt)
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if v := <-waited; v != "old" {
		t.Fatalf("the waiting caller got %q, want the old call's result", v)
	}
	if runs.Load() != 1 {
		t.Fatalf("fn ran %d times, want 1", runs.Load())
	}
}

// TestForgetDuringRotation: Forget on a Guard with (new, old) deletes the
// record and the steps under the old secret too, so the next call runs fn
// and its steps again instead of replaying what the old secret recorded.
func TestForgetDuringRotation(t *testing.T) {
	ctx := context.Background()
	s := mustMem()
	gOld, err := idem.New[string](s, idem.WithSecret(secretOld))
	if err != nil {
		t.Fatal(err)
	}
	gNew, err := idem.New[string](s, idem.WithSecret(secretNew, secretOld))
	if err != nil {
		t.Fatal(err)
	}
	var runs, steps atomic.Int64
	fn := func(ctx context.Context) (string, error) {
		n := runs.Add(1)
		if _, err := idem.Step(ctx, "charge", func(context.Context) (int64, error) {
			return steps.Add(1), nil
		}); err != nil {
			return "", err
		}
		return fmt.Sprint("run ", n), nil
	}
	if v, err := gOld.Do(ctx, "forget-rotated", fn); err != nil || v != "run 1" {
		t.Fatalf("first call under the old secret = %q, %v", v, err)
	}
	if v, err := gNew.Do(ctx, "forget-rotated", fn); err != nil || v != "run 1" || runs.Load() != 1 {
		t.Fatalf("before Forget: %q, %v, runs %d; want the old record replayed", v, err, runs.Load())
	}
	if err := gNew.Forget(ctx, "forget-rotated"); err != nil {
		t.Fatal(err)
	}
	v, err := gNew.Do(ctx, "forget-rotated", fn)
	if err != nil {
		t.Fatal(err)
	}
	if v != "run 2" || runs.Load() != 2 || steps.Load() != 2 {
		t.Fatalf("after Forget: %q, runs %d, steps %d; want fn and its step run again (run 2, 2, 2)", v, runs.Load(), steps.Load())
	}
	// The old secret's Guard (a process of the first deploy) sees the key
	// forgotten too: its record and steps are gone.
	if _, err := gOld.Do(ctx, "forget-rotated", fn); err != nil || runs.Load() != 3 || steps.Load() != 3 {
		t.Fatalf("old-secret Guard after Forget: %v, runs %d, steps %d; want 3, 3", err, runs.Load(), steps.Load())
	}
}
