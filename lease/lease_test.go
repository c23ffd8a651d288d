package lease

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// testConfig is a Holder's functions and a Config in one literal.
type testConfig struct {
	Interval, Margin time.Duration
	Refresh          func(context.Context) (time.Duration, error)
	Lost             func(error) error // nil: every error is transient
	OnLapse          func(time.Duration, error) error
	OnRefresh        func(time.Duration)
	OnError          func(error)
}

type holder struct{ c testConfig }

func (h holder) Refresh(ctx context.Context) (time.Duration, error) { return h.c.Refresh(ctx) }

func (h holder) Lost(err error) error {
	if h.c.Lost == nil {
		return nil
	}
	return h.c.Lost(err)
}

func (h holder) Lapsed(since time.Duration, last error) error { return h.c.OnLapse(since, last) }

// start starts a Refresher with c's functions as its Holder.
func start(ctx context.Context, cancel context.CancelCauseFunc, since time.Time, valid time.Duration, c testConfig) *Refresher {
	r := new(Refresher)
	r.Start(ctx, cancel, since, valid, holder{c}, Config{Interval: c.Interval, Margin: c.Margin, OnRefresh: c.OnRefresh, OnError: c.OnError})
	return r
}

// wait is how long a test waits for something that must happen: generous,
// so that a loaded machine never fails a test; only a wrong outcome does.
const wait = 10 * time.Second

func TestToken(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		tok := Token()
		if len(tok) != 32 {
			t.Fatalf("Token() = %q, want 32 hex digits", tok)
		}
		if seen[tok] {
			t.Fatalf("Token() repeated %q", tok)
		}
		seen[tok] = true
	}
	if h := RandomHex(4); len(h) != 8 {
		t.Fatalf("RandomHex(4) = %q, want 8 hex digits", h)
	}
}

func TestJitter(t *testing.T) {
	for _, d := range []time.Duration{1, 2, 3, time.Millisecond, time.Second} {
		for range 1000 {
			if j := Jitter(d); j < d/2 || j > d {
				t.Fatalf("Jitter(%v) = %v, outside [%v, %v]", d, j, d/2, d)
			}
		}
	}
	if j := Jitter(0); j != 0 {
		t.Fatalf("Jitter(0) = %v", j)
	}
	if j := Jitter(-time.Second); j != 0 {
		t.Fatalf("Jitter(-1s) = %v", j)
	}
}

func TestSleepReturnsCause(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	cause := errors.New("stop")
	cancel(cause)
	if err := Sleep(ctx, time.Hour); err != cause {
		t.Fatalf("Sleep = %v, want %v", err, cause)
	}
	if err := Sleep(context.Background(), time.Millisecond); err != nil {
		t.Fatalf("Sleep = %v", err)
	}
}

// lapseErr is what the tests' OnLapse cancels with.
type lapseErr struct{ last error }

func (e *lapseErr) Error() string { return "lapsed" }

// TestDeadlineCountsFromSend: a refresh's validity starts no later than its
// send, so the lapse deadline must be counted from the send. A reply that
// takes slow to come back must shorten the time left, not extend it.
func TestDeadlineCountsFromSend(t *testing.T) {
	const (
		valid = time.Hour
		slow  = 100 * time.Millisecond
	)
	lefts := make(chan time.Duration, 1)
	var calls atomic.Int32
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	r := start(ctx, cancel, time.Now(), valid, testConfig{
		Interval: time.Millisecond,
		Refresh: func(context.Context) (time.Duration, error) {
			if calls.Add(1) == 1 {
				time.Sleep(slow) // the reply comes back slow after the send
			}
			return valid, nil
		},
		OnRefresh: func(left time.Duration) {
			select {
			case lefts <- left:
			default:
			}
		},
		OnLapse: func(time.Duration, error) error { return &lapseErr{} },
	})
	defer r.Stop()
	select {
	case left := <-lefts:
		if left > valid-slow {
			t.Fatalf("after a refresh whose reply took %v, %v left of a validity of %v: the deadline was counted from the reply, not the send", slow, left, valid)
		}
	case <-time.After(wait):
		t.Fatal("no refresh")
	}
}

// TestLapseDoesNotWaitForHangingRefresh: with the store cut off, a refresh
// that never answers must not hold up the cut-off.
func TestLapseDoesNotWaitForHangingRefresh(t *testing.T) {
	release := make(chan struct{})
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	var lapses atomic.Int32
	r := start(ctx, cancel, time.Now(), 300*time.Millisecond, testConfig{
		Interval: 100 * time.Millisecond,
		Margin:   50 * time.Millisecond,
		Refresh: func(context.Context) (time.Duration, error) {
			<-release // ignores its context: hangs until the test lets go
			return 0, errors.New("cut off")
		},
		OnLapse: func(_ time.Duration, last error) error {
			lapses.Add(1)
			return &lapseErr{last: last}
		},
	})
	select {
	case <-ctx.Done():
	case <-time.After(wait):
		close(release)
		r.Stop()
		t.Fatal("the work was not cut off while a refresh hung")
	}
	var le *lapseErr
	if !errors.As(context.Cause(ctx), &le) {
		t.Fatalf("cause %v, want the lapse error", context.Cause(ctx))
	}
	if le.last != nil {
		t.Fatalf("lapse reports last error %v, but no refresh had returned", le.last)
	}
	close(release)
	if r.Stop() {
		t.Fatal("Stop reports the lease lost; it lapsed")
	}
	if n := lapses.Load(); n != 1 {
		t.Fatalf("OnLapse called %d times", n)
	}
}

// TestTransientErrorsThenLapse: failed refreshes are reported and retried;
// when none succeeds the lapse reports the last error.
func TestTransientErrorsThenLapse(t *testing.T) {
	errCut := errors.New("cut off")
	var calls atomic.Int32
	var mu sync.Mutex
	var reported []error
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	r := start(ctx, cancel, time.Now(), 400*time.Millisecond, testConfig{
		Interval: 20 * time.Millisecond,
		Margin:   10 * time.Millisecond,
		Refresh: func(context.Context) (time.Duration, error) {
			calls.Add(1)
			return 0, errCut
		},
		Lost: func(error) error { return nil },
		OnError: func(err error) {
			mu.Lock()
			reported = append(reported, err)
			mu.Unlock()
		},
		OnLapse: func(_ time.Duration, last error) error { return &lapseErr{last: last} },
	})
	select {
	case <-ctx.Done():
	case <-time.After(wait):
		t.Fatal("no lapse")
	}
	r.Stop()
	var le *lapseErr
	if !errors.As(context.Cause(ctx), &le) || le.last != errCut {
		t.Fatalf("cause %v, want a lapse with last error %v", context.Cause(ctx), errCut)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(reported) < 2 || int(calls.Load()) != len(reported) {
		t.Fatalf("%d refreshes, %d errors reported; want every failure reported and retried", calls.Load(), len(reported))
	}
}

// TestLostEndsRefreshing: a refresh that finds the lease gone cancels the
// work with the cause Lost gives, and no refresh is sent after it.
func TestLostEndsRefreshing(t *testing.T) {
	errGone := errors.New("gone")
	cause := errors.New("taken over")
	var calls atomic.Int32
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	r := start(ctx, cancel, time.Now(), time.Hour, testConfig{
		Interval: time.Millisecond,
		Refresh: func(context.Context) (time.Duration, error) {
			calls.Add(1)
			return 0, errGone
		},
		Lost: func(err error) error {
			if err == errGone {
				return cause
			}
			return nil
		},
		OnLapse: func(time.Duration, error) error { return &lapseErr{} },
	})
	select {
	case <-ctx.Done():
	case <-time.After(wait):
		t.Fatal("not cancelled")
	}
	if !r.Stop() {
		t.Fatal("Stop does not report the lease lost")
	}
	if got := context.Cause(ctx); got != cause {
		t.Fatalf("cause %v, want %v", got, cause)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d refreshes sent; want none after the one that found the lease lost", n)
	}
}

// TestRefreshKeepsLease: while refreshes succeed the work runs on past the
// first deadline, and Stop ends refreshing without cancelling it.
func TestRefreshKeepsLease(t *testing.T) {
	const valid = time.Second
	var calls atomic.Int32
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	r := start(ctx, cancel, time.Now(), valid, testConfig{
		Interval: 10 * time.Millisecond,
		Margin:   5 * time.Millisecond,
		Refresh: func(context.Context) (time.Duration, error) {
			calls.Add(1)
			return valid, nil
		},
		OnLapse: func(time.Duration, error) error { return &lapseErr{} },
	})
	// Past the first deadline by counting refreshes, not by the clock:
	// 250 refreshes at least one interval apart span 2.5 validities.
	deadline := time.Now().Add(wait)
	for calls.Load() < 250 && time.Now().Before(deadline) && ctx.Err() == nil {
		time.Sleep(5 * time.Millisecond)
	}
	if r.Stop() {
		t.Fatal("Stop reports the lease lost")
	}
	if err := context.Cause(ctx); err != nil {
		t.Fatalf("work cancelled (%v) although every refresh succeeded", err)
	}
	if n := calls.Load(); n < 250 {
		t.Fatalf("only %d refreshes", n)
	}
	n := calls.Load()
	time.Sleep(50 * time.Millisecond)
	if calls.Load() != n {
		t.Fatal("a refresh was sent after Stop")
	}
}

// TestShortWorkSendsNothing: work that ends within one interval costs no
// refresh.
func TestShortWorkSendsNothing(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	r := start(ctx, cancel, time.Now(), time.Hour, testConfig{
		Interval: time.Hour,
		Refresh: func(context.Context) (time.Duration, error) {
			t.Error("refresh sent")
			return time.Hour, nil
		},
		OnLapse: func(time.Duration, error) error { return &lapseErr{} },
	})
	if r.Stop() {
		t.Fatal("lost")
	}
}

func TestStopUnstarted(t *testing.T) {
	var r Refresher
	if r.Stop() {
		t.Fatal("a Refresher never started reports its lease lost")
	}
}

// TestHaltDoesNotWait: Halt returns at once while a refresh hangs, and the
// refresh, when it returns refused, cancels nothing.
func TestHaltDoesNotWait(t *testing.T) {
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	inRefresh, unblock := make(chan struct{}), make(chan struct{})
	var once sync.Once
	r := start(ctx, cancel, time.Now(), time.Hour, testConfig{
		Interval: time.Millisecond,
		Refresh: func(context.Context) (time.Duration, error) {
			once.Do(func() { close(inRefresh) })
			<-unblock
			return 0, errors.New("refused")
		},
		Lost:    func(err error) error { return err },
		OnLapse: func(time.Duration, error) error { return errors.New("lapsed") },
	})
	<-inRefresh
	done := make(chan bool)
	go func() { done <- r.Halt() }()
	select {
	case lost := <-done:
		if lost {
			t.Error("Halt reported a loss no refresh had found")
		}
	case <-time.After(wait):
		t.Fatal("Halt waited for the refresh in flight")
	}
	close(unblock)
	time.Sleep(20 * time.Millisecond)
	if ctx.Err() != nil {
		t.Errorf("a refresh that returned after Halt cancelled the work: %v", context.Cause(ctx))
	}
}
