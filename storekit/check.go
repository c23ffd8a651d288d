package storekit

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrInvalidRequest is matched (errors.Is) by every *RequestError: a call
// that no Guard makes, such as a claim without a nonce or a completion with
// an unknown status. Retrying it cannot help.
var ErrInvalidRequest = errors.New("idem: invalid store request")

// RequestError says which field of a store call was rejected. It matches
// ErrInvalidRequest.
type RequestError struct {
	Op     string // claim, heartbeat, complete, release, get, delete
	Field  string // the rejected field, such as "Nonce" or "Status"
	Reason string
}

func (e *RequestError) Error() string {
	return "idem: invalid " + e.Op + " request: " + e.Field + ": " + e.Reason
}

// Is makes a RequestError match ErrInvalidRequest.
func (e *RequestError) Is(target error) bool { return target == ErrInvalidRequest }

// ValidateKey checks a storage key: it must not be empty. Stores with a
// tighter rule (a length limit, a character set) check it after this.
func ValidateKey(key string) error {
	if key == "" {
		return &KeyError{Reason: "empty storage key"}
	}
	return nil
}

// ValidateClaim checks a ClaimRequest before a store acts on it: a storage
// key, a nonce, and a lease and takeover threshold of at least a
// millisecond (records keep times in milliseconds).
func ValidateClaim(req ClaimRequest) error {
	if err := ValidateKey(req.Key); err != nil {
		return err
	}
	switch {
	case req.Nonce == "":
		return &RequestError{Op: "claim", Field: "Nonce", Reason: "empty"}
	case req.LeaseTTL < time.Millisecond:
		return &RequestError{Op: "claim", Field: "LeaseTTL", Reason: fmt.Sprintf("%v is under 1ms", req.LeaseTTL)}
	case req.TakeoverAfter < time.Millisecond:
		return &RequestError{Op: "claim", Field: "TakeoverAfter", Reason: fmt.Sprintf("%v is under 1ms", req.TakeoverAfter)}
	}
	return nil
}

// ValidateCompletion checks a Completion: status completed or failed, a
// failure with its error, and a TTL of at least a millisecond.
func ValidateCompletion(c Completion) error {
	switch {
	case c.Status != StatusCompleted && c.Status != StatusFailed:
		return &RequestError{Op: "complete", Field: "Status", Reason: fmt.Sprintf("%q is not completed or failed", c.Status)}
	case c.Status == StatusFailed && c.Error == nil:
		return &RequestError{Op: "complete", Field: "Error", Reason: "a failure needs its error"}
	case c.TTL < time.Millisecond:
		return &RequestError{Op: "complete", Field: "TTL", Reason: fmt.Sprintf("%v is under 1ms", c.TTL)}
	}
	return nil
}

// ValidateOwner checks the key and nonce of a heartbeat, complete or
// release. An empty nonce is ErrLostOwnership, not a request error: no
// record carries one, so the call could never own the key, and the store
// need not look.
func ValidateOwner(key, nonce string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if nonce == "" {
		return fmt.Errorf("empty nonce: %w", ErrLostOwnership)
	}
	return nil
}

// Found is the rule of Store.Get: a record that is missing (nil) or no
// longer live at now (Unix ms) is ErrNotFound, whatever the backend's
// own expiry has or has not deleted.
func Found(cur *Record, now int64) (*Record, error) {
	if cur == nil || !cur.Live(now) {
		return nil, ErrNotFound
	}
	return cur, nil
}

// CheckRecord is the check of a record a store decoded (or is about to
// encode): Record.Validate's invariants, and an attempt below
// math.MaxInt64, since a record at the largest attempt could never be
// claimed again (its next attempt is out of range). A store reports a
// record that fails it as an *CorruptRecordError, whatever path read
// it (a claim, Get, a listing), and never takes it over; a store whose
// backend decides a claim itself (SQL, scripts) refuses to write over such
// a record by the same rule.
func CheckRecord(r *Record) error {
	if err := r.Validate(); err != nil {
		return err
	}
	if r.Attempt == math.MaxInt64 {
		return fmt.Errorf("attempt %d is the largest: no claim can follow it", r.Attempt)
	}
	return nil
}
