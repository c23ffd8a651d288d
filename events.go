package idem

import (
	"context"
	"log/slog"
	"time"
)

// EventKind names what happened to a key.
type EventKind int

// Event kinds. Hits over (hits + claims) is the hit rate; takeovers over
// claims the takeover rate; failures over claims the failure rate.
const (
	EventClaim             EventKind = iota // a new claim; fn is about to run
	EventTakeover                           // a stale claim was taken over; fn is about to run
	EventHit                                // a completed result was replayed
	EventInProgress                         // a duplicate of a live call was turned away
	EventWait                               // a duplicate started waiting for a live call
	EventLostOwnership                      // the claim was taken over while fn ran
	EventFailure                            // fn failed, panicked or exited
	EventPreviousFailure                    // a stored failure was replayed
	EventPayloadMismatch                    // a call reused a key with a different payload
	EventNotRecorded                        // fn's outcome could not be stored
	EventHeartbeatError                     // a heartbeat failed (not a loss of ownership)
	EventResultUnavailable                  // a result could not be encoded, or a replay had none
	EventComplete                           // fn returned without error; its result is about to be stored
	EventWaitDone                           // a wait ended with the key decided (Duration: how long it lasted)
	EventRefresh                            // a heartbeat refreshed the claim; Duration is the lapse margin
	EventLapse                              // no heartbeat succeeded in time; fn's context is cancelled
	EventStepRun                            // a step was claimed (or taken over); its fn is about to run
	EventStepReplayed                       // a step's recorded result was returned without running it
	numEventKinds
)

var eventNames = [...]string{
	"claim", "takeover", "hit", "in_progress", "wait", "lost_ownership",
	"failure", "previous_failure", "payload_mismatch", "not_recorded",
	"heartbeat_error", "result_unavailable", "complete", "wait_done",
	"refresh", "lapse", "step_run", "step_replayed",
}

func (k EventKind) String() string {
	if k >= 0 && k < numEventKinds {
		return eventNames[k]
	}
	return "unknown"
}

// Event is what an Observer sees. It carries the storage key, never the
// caller's raw key or payload.
type Event struct {
	Kind       EventKind
	StorageKey string
	Attempt    int64 // claim number, when known
	// Duration is how long fn ran or the wait lasted; for EventRefresh, how
	// long fn may go on without a heartbeat before its context is cancelled;
	// for EventLapse, what is left before the claim may be taken over.
	Duration time.Duration
	Err      error  // the error behind a failure, when there is one
	Scope    string // the Guard's scope (WithNamespace), "" if none
}

// Observer receives events. Observe must be safe for concurrent use and
// should return quickly.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to Observer.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f.
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// LogObserver returns an Observer that logs each event to l.
func LogObserver(l *slog.Logger) Observer {
	return ObserverFunc(func(ctx context.Context, e Event) {
		level := slog.LevelDebug
		switch e.Kind {
		case EventTakeover, EventFailure, EventPreviousFailure, EventPayloadMismatch:
			level = slog.LevelInfo
		case EventLostOwnership, EventNotRecorded, EventHeartbeatError, EventResultUnavailable, EventLapse:
			level = slog.LevelWarn
		}
		if !l.Enabled(ctx, level) {
			return
		}
		attrs := []slog.Attr{slog.String("key", e.StorageKey), slog.Int64("attempt", e.Attempt)}
		if e.Duration > 0 {
			attrs = append(attrs, slog.Duration("duration", e.Duration))
		}
		if e.Err != nil {
			attrs = append(attrs, slog.String("error", e.Err.Error()))
		}
		l.LogAttrs(ctx, level, "idem "+e.Kind.String(), attrs...)
	})
}
