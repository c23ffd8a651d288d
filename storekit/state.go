package storekit

import (
	"context"
	"fmt"
	"iter"
	"time"
)

// RecordState is how a live record looks to an operator at a given time:
// Status, with an in-progress record whose owner stopped heartbeating told
// apart as stale.
type RecordState string

// Record states, as idem ls prints and filters them.
const (
	StateInProgress RecordState = "in_progress" // claimed, its owner heartbeating
	StateStale      RecordState = "stale"       // claimed, heartbeat older than the takeover threshold
	StateFailed     RecordState = "failed"      // a recorded failure
	StateCompleted  RecordState = "completed"   // a recorded result
	// StateStepsEpoch is a call's steps epoch: the record that names the
	// generation of a call's steps (see Step). It is never a stuck call:
	// it lives as long as the call can be retried, and releasing or
	// deleting it would make finished steps run again.
	StateStepsEpoch RecordState = "steps_epoch"
)

// StepsEpochPayload is the PayloadHash of every steps epoch record, so that
// operators' tools tell it from a call (see StateStepsEpoch).
const StepsEpochPayload = "idem:steps-epoch"

// StepsEpoch reports whether r is a call's steps epoch record.
func (r *Record) StepsEpoch() bool { return r.PayloadHash == StepsEpochPayload }

// StepPayload is the PayloadHash of every step's record (see Step), so that
// operators' tools tell it from a call's.
const StepPayload = "idem:step"

// StepRecord reports whether r is the record of one step of a call.
func (r *Record) StepRecord() bool { return r.PayloadHash == StepPayload }

// RecordStates returns every state, in the order idem stats prints them.
func RecordStates() []RecordState {
	return []RecordState{StateInProgress, StateStale, StateFailed, StateCompleted, StateStepsEpoch}
}

// ParseRecordState returns the state named s, or an error naming the states.
func ParseRecordState(s string) (RecordState, error) {
	for _, st := range RecordStates() {
		if string(st) == s {
			return st, nil
		}
	}
	return "", fmt.Errorf("unknown record state %q; the states are in_progress, stale, failed, completed, steps_epoch", s)
}

// State classifies r at now (Unix ms): completed and failed as stored, an
// in-progress record stale when Stale(now, takeoverAfter) says so (the
// threshold stored with the claim wins; takeoverAfter is used only for a
// record without one).
func (r *Record) State(now int64, takeoverAfter time.Duration) RecordState {
	if r.StepsEpoch() {
		return StateStepsEpoch
	}
	switch r.Status {
	case StatusCompleted:
		return StateCompleted
	case StatusFailed:
		return StateFailed
	}
	if r.Stale(now, takeoverAfter) {
		return StateStale
	}
	return StateInProgress
}

// Lister is implemented by stores that can list their records, for
// operators (idem ls, idem stats).
//
// Records yields every live record of the store (expired ones are skipped),
// each once, in no particular order, reading the store in pages so that
// memory stays flat however many records there are; it takes no lock that
// would hold up a claim. A record written, changed or removed while the
// listing runs may be yielded in its old or new state, or not at all.
// Errors are yielded with a nil record: a record that cannot be decoded as
// a *CorruptRecordError, after which the listing goes on if the caller
// does; any other error ends the sequence. The records of
// a call's steps are records too, under storage keys derived from the
// call's, and are listed like any other.
//
// Stores whose keys are not ordered by the backend (Redis, DynamoDB, NATS,
// files) scan their whole keyspace to list; their docs say so.
type Lister interface {
	Records(ctx context.Context) iter.Seq2[*Record, error]
}
