package storekit

import (
	"errors"
	"fmt"
	"time"
)

// Status is the state of a record.
type Status string

// Record statuses.
const (
	StatusInProgress Status = "in_progress"
	StatusCompleted  Status = "completed"
	StatusFailed     Status = "failed"
)

// Valid reports whether s is one of the three statuses.
func (s Status) Valid() bool {
	return s == StatusInProgress || s == StatusCompleted || s == StatusFailed
}

// Record is what a store keeps for one key. Times are Unix milliseconds, as
// stored; a record is live while ExpiresAt is in the future, whatever the
// store's native expiry has or has not deleted.
type Record struct {
	Key         string           // storage key (never the caller's raw key)
	Status      Status           // in_progress, completed or failed
	Result      []byte           // encoded result (completed)
	Error       *RecordedFailure // failure (failed), or why the result is unavailable (completed)
	PayloadHash string           // hash of the call's payload, "" if none
	Nonce       string           // ownership token of the current claim
	Attempt     int64            // claim number, monotonic while the record exists
	StartedAt   int64            // when the current claim was made
	HeartbeatAt int64            // when the owner last proved it was alive
	CompletedAt int64            // when the outcome was recorded (0 while in progress)
	ExpiresAt   int64            // when the record stops counting
	// TakeoverMs is the owner's takeover threshold in milliseconds, stored
	// with the claim: staleness is judged by the threshold the owner
	// heartbeats for, never by a caller's shorter one. 0 (a record from a
	// store that does not keep it) falls back to the caller's threshold.
	TakeoverMs int64
	// Owner names the process that made the current claim
	// (ClaimRequest.Owner, FormatOwner), "" when unknown.
	Owner string
}

// ResultUnavailableType is the RecordedFailure.Type of a completed record whose
// result could not be encoded.
const ResultUnavailableType = "idem.result_unavailable"

// Live reports whether the record has not expired at now (Unix ms).
func (r *Record) Live(now int64) bool { return r.ExpiresAt > now }

// Stale reports whether r is an in-progress record whose heartbeat is at
// least its owner's takeover threshold old at now (Unix ms), so a new caller
// may take it over. The threshold stored with the claim (TakeoverMs) wins;
// takeoverAfter, the caller's, is used only for a record without one.
func (r *Record) Stale(now int64, takeoverAfter time.Duration) bool {
	threshold := r.TakeoverMs
	if threshold <= 0 {
		threshold = takeoverAfter.Milliseconds()
	}
	return r.Status == StatusInProgress && now-r.HeartbeatAt >= threshold
}

// Clone returns a deep copy of r.
func (r *Record) Clone() *Record {
	if r == nil {
		return nil
	}
	c := *r
	if r.Result != nil {
		c.Result = append([]byte(nil), r.Result...)
	}
	if r.Error != nil {
		e := *r.Error
		c.Error = &e
	}
	return &c
}

// Validate checks the invariants every decoded record must satisfy.
func (r *Record) Validate() error {
	switch {
	case r.Key == "":
		return errors.New("empty key")
	case !r.Status.Valid():
		return fmt.Errorf("unknown status %q", r.Status)
	case r.Nonce == "":
		return errors.New("empty nonce")
	case r.Attempt < 1:
		return fmt.Errorf("attempt %d < 1", r.Attempt)
	case r.Status == StatusFailed && r.Error == nil:
		return errors.New("failed record without error")
	case r.TakeoverMs < 0:
		return fmt.Errorf("takeover threshold %d < 0", r.TakeoverMs)
	}
	return nil
}
