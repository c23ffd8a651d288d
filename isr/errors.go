package isr

import (
	"errors"
	"fmt"
	"strings"
)

// Sentinel errors. Match them with errors.Is; the typed errors below carry
// detail for errors.As.
var (
	// ErrNotFound: the item (META, LOCK, REQ# or VER#) does not exist.
	ErrNotFound = errors.New("isr: not found")
	// ErrLeaseHeld: acquire found a lease that another worker holds
	// (lease_expires_at > now). See *LeaseHeldError.
	ErrLeaseHeld = errors.New("isr: lease held by another worker")
	// ErrLeaseLost: the caller's lease token no longer matches, or its lease
	// has expired; refresh, release or publish was refused and nothing was
	// written.
	ErrLeaseLost = errors.New("isr: lease lost")
	// ErrMetaChanged: acquire was conditioned on the META the caller saw,
	// and META has been published since. Re-read it; it is probably fresh.
	ErrMetaChanged = errors.New("isr: META changed since it was read")
	// ErrVersionConflict: recipe B's optimistic version check failed (META's
	// version is not the one the caller regenerated from).
	ErrVersionConflict = errors.New("isr: META version conflict")
	// ErrVersionExists: recipe B's VER#<id> item already exists.
	ErrVersionExists = errors.New("isr: version id already exists")
	// ErrNotNewer: the optional monotonic guard refused a publish whose
	// generated_at is not newer than META's.
	ErrNotNewer = errors.New("isr: generated_at not newer than META")
	// ErrRequestMismatch: a REQ# item exists for the idempotency key with a
	// different request_hash. The request fails closed.
	ErrRequestMismatch = errors.New("isr: idempotency key reused with different request")
	// ErrRequestInProgress: the REQ# item for the idempotency key is
	// STARTED; another worker is handling this request.
	ErrRequestInProgress = errors.New("isr: request in progress")
	// ErrRequestFailed: the REQ# item for the idempotency key is FAILED and
	// the caller asked not to retry failed requests.
	ErrRequestFailed = errors.New("isr: request previously failed")
	// ErrRequestState: completing or failing a request found the REQ# item
	// missing or not STARTED with the caller's hash.
	ErrRequestState = errors.New("isr: request record not in expected state")
	// ErrConflict: the store refused a transaction because a concurrent
	// transaction touched the same items (DynamoDB TransactionConflict).
	// Nothing was written; retrying is safe.
	ErrConflict = errors.New("isr: concurrent transaction conflict")
	// ErrInvalidInput: a key or argument of a call is malformed. (A
	// constructor reports a bad argument or option as an *storekit.OptionError
	// matching idem.ErrInvalidOption.)
	ErrInvalidInput = errors.New("isr: invalid input")
	// ErrCorruptItem: an item in the table does not have the schema's
	// attribute names and types. See *CorruptItemError.
	ErrCorruptItem = errors.New("isr: corrupt item")
)

// InvalidInputError says which input was rejected and why. It matches
// ErrInvalidInput.
type InvalidInputError struct {
	What   string
	Reason string
}

func (e *InvalidInputError) Error() string {
	return "isr: invalid " + e.What + ": " + e.Reason
}

// Unwrap returns ErrInvalidInput.
func (e *InvalidInputError) Unwrap() error { return ErrInvalidInput }

func invalid(what, reason string) error { return &InvalidInputError{What: what, Reason: reason} }

// LeaseHeldError is returned by acquire when another worker holds the lease.
// It matches ErrLeaseHeld.
type LeaseHeldError struct {
	PK        string
	ExpiresAt int64 // the holder's lease_expires_at (epoch seconds)
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("isr: lease on %s held until %d", e.PK, e.ExpiresAt)
}

// Unwrap returns ErrLeaseHeld.
func (e *LeaseHeldError) Unwrap() error { return ErrLeaseHeld }

// RequestError describes an existing REQ# item that stopped a request: a
// different request_hash (ErrRequestMismatch), STARTED
// (ErrRequestInProgress) or FAILED (ErrRequestFailed).
type RequestError struct {
	PK      string
	Request Request // the stored item
	Err     error   // one of the sentinels above
}

func (e *RequestError) Error() string {
	return fmt.Sprintf("%v (pk %s, key %s, status %s)", e.Err, e.PK, e.Request.Key, e.Request.Status)
}

// Unwrap returns the sentinel.
func (e *RequestError) Unwrap() error { return e.Err }

// TxError is a refused write: a publish transaction cancelled by DynamoDB
// (or the memory table's equivalent), or a refused conditional write. Reasons
// holds one entry per transaction item, in order ("None",
// "ConditionalCheckFailed", "TransactionConflict", ...). Errors holds the
// sentinels the reasons map to (ErrLeaseLost, ErrVersionConflict,
// ErrVersionExists, ErrNotNewer, ErrRequestState, ErrMetaChanged,
// ErrLeaseHeld, ErrConflict); errors.Is matches any of them.
type TxError struct {
	Op      string // "acquire", "publish", "publish-pointer", ...
	PK      string
	Reasons []string
	Errors  []error
}

func (e *TxError) Error() string {
	msgs := make([]string, 0, len(e.Errors))
	for _, err := range e.Errors {
		msgs = append(msgs, err.Error())
	}
	return fmt.Sprintf("isr: %s on %s refused: %s (reasons %v)", e.Op, e.PK, strings.Join(msgs, "; "), e.Reasons)
}

// Unwrap returns the mapped sentinels.
func (e *TxError) Unwrap() []error { return e.Errors }

// CorruptItemError says which item and attribute break the schema. It
// matches ErrCorruptItem.
type CorruptItemError struct {
	PK, SK string
	Attr   string
	Reason string
}

func (e *CorruptItemError) Error() string {
	return fmt.Sprintf("isr: corrupt item %s/%s: attribute %s: %s", e.PK, e.SK, e.Attr, e.Reason)
}

// Unwrap returns ErrCorruptItem.
func (e *CorruptItemError) Unwrap() error { return ErrCorruptItem }

// LapseError is the cause with which Regenerate cancels a render's context
// when the lease could not be refreshed in time (the table unreachable,
// say): half a refresh interval before ExpiresAt, so the render stops
// while the lease is still held and before another worker could acquire
// it. The page the render returns is not published. It matches
// ErrLeaseLost; Err is the last refresh failure, if any.
type LapseError struct {
	PK        string
	ExpiresAt int64 // lease_expires_at of the lease that could not be kept
	Err       error
}

func (e *LapseError) Error() string {
	s := fmt.Sprintf("isr: lease on %s not refreshed before it expires at %d; render stopped", e.PK, e.ExpiresAt)
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is makes a LapseError match ErrLeaseLost.
func (e *LapseError) Is(target error) bool { return target == ErrLeaseLost }

// Unwrap returns the last refresh failure.
func (e *LapseError) Unwrap() error { return e.Err }
