package idem

import (
	"context"
	"log/slog"
	"time"
)

// EventKind names what happened to a key. Its value is the name the logs
// and otelidem print.
type EventKind string

// Event kinds. Hits over (hits + claims) is the hit rate; takeovers over
// claims the takeover rate; failures over claims the failure rate.
const (
	EventClaim             EventKind = "claim"              // a new claim; fn is about to run
	EventTakeover          EventKind = "takeover"           // a stale claim, or one whose owner is gone (Event.OwnerGone), was taken over; fn is about to run
	EventHit               EventKind = "hit"                // a completed result was replayed
	EventInProgress        EventKind = "in_progress"        // a duplicate of a live call was turned away
	EventWait              EventKind = "wait"               // a duplicate started waiting for a live call
	EventLostOwnership     EventKind = "lost_ownership"     // the claim was taken over while fn ran
	EventFailure           EventKind = "failure"            // fn failed, panicked or exited
	EventPreviousFailure   EventKind = "previous_failure"   // a stored failure was replayed
	EventPayloadMismatch   EventKind = "payload_mismatch"   // a call reused a key with a different payload
	EventNotRecorded       EventKind = "not_recorded"       // fn's outcome could not be stored
	EventResultUnavailable EventKind = "result_unavailable" // a result could not be encoded, or a replay had none
	EventComplete          EventKind = "complete"           // fn returned without error; its result is about to be stored
	EventWaitDone          EventKind = "wait_done"          // a wait ended with the key decided (Duration: how long it lasted)
	EventHeartbeat         EventKind = "heartbeat"          // a heartbeat refreshed the claim (Duration: the lapse margin), or failed without a loss of ownership (Err)
	EventLapse             EventKind = "lapse"              // no heartbeat succeeded in time; fn's context is cancelled
	EventStepRun           EventKind = "step_run"           // a step was claimed (or taken over); its fn is about to run
	EventStepReplayed      EventKind = "step_replayed"      // a step's recorded result was returned without running it
)

// Event is what an Observer sees. It carries the storage key, never the
// caller's raw key or payload.
type Event struct {
	Kind       EventKind
	StorageKey string
	Attempt    int64 // claim number, when known
	// Duration is how long fn ran or the wait lasted; for a successful EventHeartbeat, how
	// long fn may go on without a heartbeat before its context is cancelled;
	// for EventLapse, what is left before the claim may be taken over.
	Duration time.Duration
	Err      error  // the error behind a failure, when there is one
	Scope    string // the Guard's scope (WithNamespace), "" if none
	// OwnerGone is set on EventTakeover and EventStepRun when the claim
	// was taken from an owner known gone (its process died, or it was an
	// earlier incarnation of this process's WithInstanceID) rather than
	// because it went stale.
	OwnerGone bool
}

// Observer receives events. It must be safe for concurrent use and should
// return quickly.
type Observer func(ctx context.Context, e Event)

// both returns an Observer that sends each event to a and then b, either
// of which may be nil.
func both(a, b Observer) Observer {
	if a == nil {
		return b
	}
	if b == nil {
		return a
	}
	return func(ctx context.Context, e Event) {
		a(ctx, e)
		b(ctx, e)
	}
}

// logObserver returns an Observer that logs each event to l.
func logObserver(l *slog.Logger) Observer {
	return func(ctx context.Context, e Event) {
		level := slog.LevelDebug
		switch e.Kind {
		case EventTakeover, EventFailure, EventPreviousFailure, EventPayloadMismatch:
			level = slog.LevelInfo
		case EventLostOwnership, EventNotRecorded, EventResultUnavailable, EventLapse:
			level = slog.LevelWarn
		case EventHeartbeat:
			if e.Err != nil {
				level = slog.LevelWarn
			}
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
		if e.OwnerGone {
			attrs = append(attrs, slog.Bool("owner_gone", true))
		}
		l.LogAttrs(ctx, level, "idem "+string(e.Kind), attrs...)
	}
}
