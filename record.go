package idem

import (
	"encoding/json"
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
	Key         string       // storage key (never the caller's raw key)
	Status      Status       // in_progress, completed or failed
	Result      []byte       // encoded result (completed)
	Error       *StoredError // failure (failed), or why the result is unavailable (completed)
	PayloadHash string       // hash of the call's payload, "" if none
	Nonce       string       // ownership token of the current claim
	Attempt     int64        // claim number, monotonic while the record exists
	StartedAt   int64        // when the current claim was made
	HeartbeatAt int64        // when the owner last proved it was alive
	CompletedAt int64        // when the outcome was recorded (0 while in progress)
	ExpiresAt   int64        // when the record stops counting
}

// ResultUnavailableType is the StoredError.Type of a completed record whose
// result could not be encoded.
const ResultUnavailableType = "idem.result_unavailable"

// Live reports whether the record has not expired at now (Unix ms).
func (r *Record) Live(now int64) bool { return r.ExpiresAt > now }

// Stale reports whether r is an in-progress record whose heartbeat is at
// least takeoverAfter old at now (Unix ms), so a new caller may take it over.
func (r *Record) Stale(now int64, takeoverAfter time.Duration) bool {
	return r.Status == StatusInProgress && now-r.HeartbeatAt >= takeoverAfter.Milliseconds()
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
	}
	return nil
}

// recordVersion is the version of the encoding written by EncodeRecord.
const recordVersion = 1

type recordJSON struct {
	V           int          `json:"v"`
	Key         string       `json:"key"`
	Status      Status       `json:"status"`
	Result      []byte       `json:"result,omitempty"`
	Error       *StoredError `json:"error,omitempty"`
	PayloadHash string       `json:"payload_hash,omitempty"`
	Nonce       string       `json:"nonce"`
	Attempt     int64        `json:"attempt"`
	StartedAt   int64        `json:"started_at"`
	HeartbeatAt int64        `json:"heartbeat_at"`
	CompletedAt int64        `json:"completed_at,omitempty"`
	ExpiresAt   int64        `json:"expires_at"`
}

// EncodeRecord encodes r in the versioned JSON form used by stores that keep
// a record as one blob (the file store). DecodeRecord reads it back.
func EncodeRecord(r *Record) ([]byte, error) {
	if err := r.Validate(); err != nil {
		return nil, fmt.Errorf("idem: encode record: %w", err)
	}
	return json.Marshal(recordJSON{
		V: recordVersion, Key: r.Key, Status: r.Status, Result: r.Result, Error: r.Error,
		PayloadHash: r.PayloadHash, Nonce: r.Nonce, Attempt: r.Attempt,
		StartedAt: r.StartedAt, HeartbeatAt: r.HeartbeatAt, CompletedAt: r.CompletedAt,
		ExpiresAt: r.ExpiresAt,
	})
}

// DecodeRecord decodes what EncodeRecord wrote. Anything else (truncated,
// unknown version, missing fields) is a *CorruptRecordError matching
// ErrCorruptRecord; it never panics.
func DecodeRecord(b []byte) (*Record, error) {
	var j recordJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, &CorruptRecordError{Err: err}
	}
	if j.V != recordVersion {
		return nil, &CorruptRecordError{Key: j.Key, Err: fmt.Errorf("unsupported record version %d", j.V)}
	}
	r := &Record{
		Key: j.Key, Status: j.Status, Result: j.Result, Error: j.Error,
		PayloadHash: j.PayloadHash, Nonce: j.Nonce, Attempt: j.Attempt,
		StartedAt: j.StartedAt, HeartbeatAt: j.HeartbeatAt, CompletedAt: j.CompletedAt,
		ExpiresAt: j.ExpiresAt,
	}
	if len(r.Result) == 0 {
		r.Result = nil // "result":"" and no result are one state
	}
	if err := r.Validate(); err != nil {
		return nil, &CorruptRecordError{Key: j.Key, Err: err}
	}
	return r, nil
}
