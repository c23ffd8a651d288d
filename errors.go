package idem

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idem-go/idem/storekit"
)

// Sentinel errors. Match them with errors.Is; several have a typed companion
// that carries detail for errors.As.
var (
	// ErrInProgress: another caller holds a live claim on the key. Under
	// Return, retry later, or use OnDuplicate(Wait).
	ErrInProgress = errors.New("idem: operation in progress (retry later, or use OnDuplicate(Wait))")
	// ErrDuplicate: the key was already used and the guard's policy is Raise.
	ErrDuplicate = errors.New("idem: duplicate call")
	// ErrPayloadMismatch: the key was used with a different payload.
	ErrPayloadMismatch = errors.New("idem: payload does not match the stored payload")
	// ErrLostOwnership: the caller's claim was taken over (its nonce no
	// longer matches), so its writes were refused.
	ErrLostOwnership = storekit.ErrLostOwnership
	// ErrPreviousFailure: a previous run failed under OnFailure(Lock); the
	// stored failure is available as a *RecordedFailure.
	ErrPreviousFailure = storekit.ErrPreviousFailure
	// ErrResultUnavailable: the key completed but its result could not be
	// stored (not encodable, or refused for good by the store), so a replay
	// has nothing to return.
	ErrResultUnavailable = errors.New("idem: stored result unavailable")
	// ErrCorruptRecord: a stored record could not be decoded.
	ErrCorruptRecord = storekit.ErrCorruptRecord
	// ErrInvalidKey: the key is empty or cannot be canonicalised.
	ErrInvalidKey = storekit.ErrInvalidKey
	// ErrInvalidPayload: the value given to Payload cannot be canonicalised.
	ErrInvalidPayload = storekit.ErrInvalidPayload
	// ErrNotRecorded: fn ran and returned, but its outcome is known not to
	// be in the store and never to land there. The result is returned
	// alongside this error.
	ErrNotRecorded = storekit.ErrNotRecorded
	// ErrOutcomeUnknown: fn ran and returned, but whether its outcome was
	// recorded cannot be known; the key may well replay it. The result is
	// returned alongside this error.
	ErrOutcomeUnknown = storekit.ErrOutcomeUnknown
	// ErrInvalidOption: an option given to New is invalid.
	ErrInvalidOption = storekit.ErrInvalidOption
)

// duplicateError is returned for a duplicate call. It matches ErrDuplicate,
// and ErrInProgress when the original call is still running.
type duplicateError struct {
	StorageKey string
	Status     storekit.Status // status of the record that made this call a duplicate
	Attempt    int64
}

func (e *duplicateError) Error() string {
	if e.Status == storekit.StatusInProgress {
		return "idem: duplicate call: operation in progress"
	}
	return "idem: duplicate call: key already " + string(e.Status)
}

// Is makes a duplicateError match ErrDuplicate, and ErrInProgress when the
// record is in progress.
func (e *duplicateError) Is(target error) bool {
	return target == ErrDuplicate || (target == ErrInProgress && e.Status == storekit.StatusInProgress)
}

// Bounds of a stored failure message, in bytes: every store holds a
// message this long. The short one is what is kept when a store refuses
// the full one for good.
const (
	maxStoredMessage = 4096
	minStoredMessage = 256
	maxStoredType    = 256
)

// storableError returns a RecordedFailure that every store can hold: message
// and type as valid UTF-8 without NUL bytes (PostgreSQL text refuses both),
// the message cut to at most max bytes and the type to maxStoredType, on
// rune boundaries.
func storableError(msg, typ string, max int) *RecordedFailure {
	return &RecordedFailure{Message: storableString(msg, max), Type: storableString(typ, maxStoredType)}
}

func storableString(s string, max int) string {
	s = strings.ToValidUTF8(s, "\uFFFD")
	s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	if len(s) <= max {
		return s
	}
	const more = "…"
	cut := max - len(more)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + more
}

// lapseError is the cause with which fn's context is cancelled when its
// claim could not be refreshed in time and may be taken over: fn should
// stop. It matches ErrLostOwnership; the call's error joins fn's error
// with it, so errors.Is(err, ErrLostOwnership) tells a call cut off by the
// Guard (safe to try again) from one given up by its own context.
type lapseError struct {
	Since time.Duration // how long the claim went unrefreshed
}

func (e *lapseError) Error() string {
	return fmt.Sprintf("idem: claim not refreshed for %v; it may be taken over", e.Since)
}

// Is makes a lapseError match ErrLostOwnership.
func (e *lapseError) Is(target error) bool { return target == ErrLostOwnership }

// The typed errors that carry detail for errors.As. Stores build them too,
// so they are declared in package storekit; these are the same types.
type (
	// RecordedFailure is a failure recorded under OnFailure(Lock): the
	// message and a type name, never a stack. It matches
	// ErrPreviousFailure.
	RecordedFailure = storekit.RecordedFailure
	// StoreError wraps a failure of the store in one operation; a
	// permanent one matches storekit.ErrPermanent.
	StoreError = storekit.StoreError
)

// storeErr wraps a store failure in a *StoreError unless the store already
// returned one.
func storeErr(op string, err error) error {
	var se *StoreError
	if errors.As(err, &se) {
		return err
	}
	return &StoreError{Op: op, Err: err}
}

// unsent reports whether err says a request never reached the store (the
// connection could not be made), so it cannot have been applied.
func unsent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

func joinErr(a, b error) error {
	if b == nil {
		return a
	}
	return errors.Join(a, b)
}
