package idem_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

type failHeartbeats struct{ storekit.Store }

func (failHeartbeats) Heartbeat(context.Context, string, string, time.Duration) error {
	return errors.New("injected: unreachable")
}

type eventLog struct {
	mu     sync.Mutex
	events []idem.Event
}

func (l *eventLog) Observe(_ context.Context, e idem.Event) {
	l.mu.Lock()
	l.events = append(l.events, e)
	l.mu.Unlock()
}

func (l *eventLog) of(k idem.EventKind) []idem.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []idem.Event
	for _, e := range l.events {
		if e.Kind == k {
			out = append(out, e)
		}
	}
	return out
}

// TestRefreshAndLapseEvents: each successful heartbeat is observed with the
// lapse margin, and a lapse is observed, with what is left before a
// takeover, before fn sees its context end.
func TestRefreshAndLapseEvents(t *testing.T) {
	var log eventLog
	opts := []idem.Option{idem.WithTakeoverAfter(400 * time.Millisecond), idem.WithHeartbeat(50 * time.Millisecond), idem.WithObserver(log.Observe)}
	g, err := idem.New[int](newMem(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	// fn runs until a refresh is observed (30s at most: a broken refresh
	// leaves none, and the test fails).
	began := time.Now()
	if _, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
		for end := time.Now().Add(30 * time.Second); len(log.of(idem.EventHeartbeat)) == 0 && time.Now().Before(end); {
			time.Sleep(5 * time.Millisecond)
		}
		return 1, nil
	}); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	var refreshes []idem.Event
	for _, e := range log.of(idem.EventHeartbeat) {
		if e.Err == nil { // a refresh; a failed heartbeat carries its error
			refreshes = append(refreshes, e)
		}
	}
	if len(refreshes) == 0 {
		t.Fatal("no refresh observed")
	}
	// A refresh's margin is the threshold less the lapse margin (25ms) less
	// the time since its heartbeat was sent: it can be zero or less only
	// when the heartbeat's round trip took the whole 375ms, which a call
	// that lasted less cannot have seen.
	for _, e := range refreshes {
		if e.Duration > 375*time.Millisecond || (e.Duration <= 0 && took < 375*time.Millisecond) {
			t.Errorf("refresh margin %v in a call of %v, want in (0, takeover - lapse margin]", e.Duration, took)
		}
	}

	g, err = idem.New[int](failHeartbeats{newMem(t)}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now() // no later than the claim was sent
	var seen time.Duration
	_, err = g.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
		<-ctx.Done()
		seen = time.Since(start) // no earlier than the lapse
		var le *idem.LapseError
		if !errors.As(context.Cause(ctx), &le) {
			t.Errorf("fn's context ended with %v, want a *LapseError", context.Cause(ctx))
		}
		if len(log.of(idem.EventLapse)) != 1 {
			t.Error("the lapse was not observed before fn's context ended")
		}
		return 0, ctx.Err()
	})
	// The call says why fn was cut off: fn's own error, and the lapse.
	var le *idem.LapseError
	if !errors.Is(err, context.Canceled) || !errors.Is(err, idem.ErrLostOwnership) || !errors.As(err, &le) {
		t.Errorf("Do after a lapse returned %v, want fn's context.Canceled joined with a *LapseError", err)
	}
	lapses := log.of(idem.EventLapse)
	if len(lapses) != 1 || lapses[0].Duration < 0 || lapses[0].Duration > 400*time.Millisecond {
		t.Fatalf("lapse events %+v, want one with a margin in [0, takeover]", lapses)
	}
	// The margin is what was left of the threshold at the lapse: it can be
	// zero only when a loaded machine fired the lapse timer that late.
	if lapses[0].Duration == 0 && seen < 400*time.Millisecond {
		t.Errorf("lapse margin 0 although fn saw the lapse %v after the claim, within the 400ms threshold", seen)
	}
}

// TestLapseRecordsFnErrorOnly: under Lock, an error fn returns after a
// lapse is recorded as fn returned it; the call's error adds the lapse.
func TestLapseRecordsFnErrorOnly(t *testing.T) {
	store := newMem(t)
	g, err := idem.New[int](failHeartbeats{store}, idem.WithTakeoverAfter(200*time.Millisecond), idem.WithHeartbeat(50*time.Millisecond), idem.OnFailure(idem.Lock))
	if err != nil {
		t.Fatal(err)
	}
	declined := errors.New("card declined")
	_, err = g.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
		<-ctx.Done()
		return 0, declined
	})
	if !errors.Is(err, declined) || !errors.Is(err, idem.ErrLostOwnership) {
		t.Fatalf("Do returned %v, want the declined error joined with the lapse", err)
	}
	_, err = g.Do(context.Background(), "k", func(context.Context) (int, error) {
		t.Error("fn ran again after a recorded failure")
		return 0, nil
	})
	var rf *idem.RecordedFailure
	if !errors.As(err, &rf) || rf.Message != declined.Error() {
		t.Fatalf("replay returned %v, want the recorded failure %q alone", err, declined)
	}
}

// TestStepLapse: a step whose own claim lapses returns fn's error joined
// with the *LapseError, so the call's fn can tell it apart.
func TestStepLapse(t *testing.T) {
	g, err := idem.New[int](failHeartbeats{newMem(t)}, idem.WithTakeoverAfter(200*time.Millisecond), idem.WithHeartbeat(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var stepErr error
	_, err = g.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
		_, stepErr = idem.Step(ctx, "charge", func(ctx context.Context) (int, error) {
			<-ctx.Done()
			return 0, ctx.Err()
		})
		return 0, stepErr
	})
	var le *idem.LapseError
	if !errors.Is(stepErr, context.Canceled) || !errors.As(stepErr, &le) {
		t.Errorf("Step after its claim lapsed returned %v, want fn's context.Canceled joined with a *LapseError", stepErr)
	}
	if !errors.Is(err, idem.ErrLostOwnership) {
		t.Errorf("Do returned %v, want an error matching ErrLostOwnership", err)
	}
}

// TestSameProcessAfterLapse: an owner whose heartbeats fail (while claims
// succeed) lapses; a caller in its own process is then answered as a
// caller in another process is: it takes the stale claim over at the
// threshold, instead of being told "in progress" while the lapsed owner's
// fn (which ignores its context) still runs.
func TestSameProcessAfterLapse(t *testing.T) {
	const takeover = 300 * time.Millisecond
	g, err := idem.New[string](failHeartbeats{newMem(t)}, idem.WithTakeoverAfter(takeover), idem.WithHeartbeat(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	defer close(release)
	started := make(chan struct{})
	go func() {
		_, _ = g.Do(context.Background(), "k", func(ctx context.Context) (string, error) {
			close(started)
			<-release // ignores its context
			return "owner", nil
		})
	}()
	<-started
	deadline := time.Now().Add(20 * takeover)
	for {
		v, err := g.Do(context.Background(), "k", func(context.Context) (string, error) { return "second", nil })
		if err == nil {
			if v != "second" {
				t.Fatalf("the same-process caller got %q, want its own run after the takeover", v)
			}
			return
		}
		if !errors.Is(err, idem.ErrInProgress) {
			t.Fatalf("the same-process caller got %v", err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the same-process caller was still told %v at %v, 20x the takeover threshold after the owner's heartbeats began to fail", err, 20*takeover)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lateClaims is a store whose every claim reply comes back after the
// takeover threshold (the claim applied).
type lateClaims struct {
	storekit.Store
	late time.Duration
}

func (s lateClaims) Claim(ctx context.Context, r storekit.ClaimRequest) (storekit.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, r)
	time.Sleep(s.late)
	return res, err
}

// TestClaimsLapseBeforeFn: a caller whose every claim reply comes after
// the threshold never starts fn; after three such claims it gets a
// *StoreError matching ErrLostOwnership.
func TestClaimsLapseBeforeFn(t *testing.T) {
	const takeover = 100 * time.Millisecond
	g, err := idem.New[int](lateClaims{newMem(t), 3 * takeover / 2}, idem.WithTakeoverAfter(takeover), idem.WithHeartbeat(takeover/4))
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	_, err = g.Do(context.Background(), "k", func(context.Context) (int, error) { runs++; return 1, nil })
	var se *idem.StoreError
	if !errors.As(err, &se) || !errors.Is(err, idem.ErrLostOwnership) {
		t.Fatalf("Do = %v; want a *StoreError matching ErrLostOwnership", err)
	}
	if runs != 0 {
		t.Errorf("fn ran %d times under claims that had lapsed", runs)
	}
}
