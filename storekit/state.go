package storekit

import (
	"fmt"
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
