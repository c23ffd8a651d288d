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

// leaseLapsed reports whether cause is the Guard's notice that the claim
// went unrefreshed too long (an *idem.LapseError): the command is stopped
// because its claim could not be refreshed.
func leaseLapsed(cause error) bool {
	var le *idem.LapseError
	return errors.As(cause, &le)
}

// leaseWatch observes the Guard's heartbeats for one run: the error of the
// last heartbeat that failed, for the message, and, once the claim lapses,
// how long is left before another run may take it over, which bounds the
// kill grace. The Guard keeps the lease; the command only listens.
type leaseWatch struct {
	mu      sync.Mutex
	margin  time.Duration // set by EventLapse
	lastErr error
}

// Observe implements idem.Observer.
func (w *leaseWatch) Observe(_ context.Context, e idem.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch e.Kind {
	case idem.EventHeartbeatError:
		w.lastErr = e.Err
	case idem.EventLapse:
		w.margin = e.Duration
	}
}

// killGrace is the longest a lapsed command may take between SIGTERM and
// SIGKILL: half of what the Guard said was left before a takeover, so the
// command is gone with time to spare (clock skew between hosts, a slow
// exit).
func (w *leaseWatch) killGrace() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.margin / 2
}

func (w *leaseWatch) heartbeatErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

// observers sends each event to every non-nil observer in list.
func observers(list ...idem.Observer) idem.Observer {
	return idem.ObserverFunc(func(ctx context.Context, e idem.Event) {
		for _, o := range list {
			if o != nil {
				o.Observe(ctx, e)
			}
		}
	})
}
