package idem_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem"
)

type failHeartbeats struct{ idem.Store }

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
	opts := []idem.Option{idem.WithTakeoverAfter(400 * time.Millisecond), idem.WithHeartbeat(50 * time.Millisecond), idem.WithObserver(&log)}
	g, err := idem.New[int](newMem(t), opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Do(context.Background(), "k", func(context.Context) (int, error) {
		time.Sleep(180 * time.Millisecond)
		return 1, nil
	}); err != nil {
		t.Fatal(err)
	}
	refreshes := log.of(idem.EventRefresh)
	if len(refreshes) == 0 {
		t.Fatal("no refresh observed")
	}
	for _, e := range refreshes {
		if e.Duration <= 0 || e.Duration > 400*time.Millisecond {
			t.Errorf("refresh margin %v, want in (0, takeover]", e.Duration)
		}
	}

	g, err = idem.New[int](failHeartbeats{newMem(t)}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = g.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
		<-ctx.Done()
		var le *idem.LapseError
		if !errors.As(context.Cause(ctx), &le) {
			t.Errorf("fn's context ended with %v, want a *LapseError", context.Cause(ctx))
		}
		if len(log.of(idem.EventLapse)) != 1 {
			t.Error("the lapse was not observed before fn's context ended")
		}
		return 0, ctx.Err()
	})
	lapses := log.of(idem.EventLapse)
	if len(lapses) != 1 || lapses[0].Duration <= 0 || lapses[0].Duration > 400*time.Millisecond {
		t.Fatalf("lapse events %+v, want one with a margin in (0, takeover]", lapses)
	}
}
