package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idem-go/idem"
)

// errLeaseExpired is what the guarded function returns when the Guard
// stopped it because its claim went unrefreshed: the claim is released,
// never recorded, since the command was cut short.
var errLeaseExpired = errors.New("the claim could not be refreshed in time")

// leaseWatch observes the Guard's heartbeats for one run: the error of the
// last heartbeat that failed, for the message, and, once the claim lapses,
// how long is left before another run may take it over, which bounds the
// kill grace. The Guard keeps the lease; the command only listens.
type leaseWatch struct {
	mu       sync.Mutex
	didLapse bool          // set by EventLapse, before the Guard cancels the run's context
	margin   time.Duration // set by EventLapse
	lastErr  error
}

// Observe is the run's idem.Observer.
func (w *leaseWatch) Observe(_ context.Context, e idem.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch e.Kind {
	case idem.EventHeartbeat:
		if e.Err != nil {
			w.lastErr = e.Err
		}
	case idem.EventLapse:
		w.didLapse, w.margin = true, e.Duration
	}
}

// killGrace is the longest a lapsed command may take between SIGTERM and
// SIGKILL: half of what the Guard said was left before a takeover, so the
// command is gone with time to spare (clock skew between hosts, a slow
// exit); ok when cause, the cause of the run's context, says the run
// lapsed.
func (w *leaseWatch) killGrace(cause error) (time.Duration, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.margin / 2, w.didLapse && errors.Is(cause, idem.ErrLostOwnership)
}

func (w *leaseWatch) heartbeatErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

// lapsed reports whether cause, the cause of the run's context, is the
// Guard's notice that the claim went unrefreshed too long: the command is
// stopped because its claim could not be refreshed (not because another
// run took it over).
func (w *leaseWatch) lapsed(cause error) bool {
	_, ok := w.killGrace(cause)
	return ok
}
