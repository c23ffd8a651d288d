package idem

import (
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Sentinel errors. Match them with errors.Is; several have a typed companion
// that carries detail for errors.As.
var (
	// ErrInProgress: another caller holds a live claim on the key.
	// The default duplicate policy (Return) answers a duplicate of a
	// running call with it: retry later, or use OnDuplicate(Wait) to wait
	// for the first call's outcome.
	ErrInProgress = errors.New("idem: operation in progress (retry later, or use OnDuplicate(Wait))")
	// ErrDuplicate: the key was already used and the guard's policy is Raise.
	ErrDuplicate = errors.New("idem: duplicate call")
	// ErrPayloadMismatch: the key was used with a different payload.
	ErrPayloadMismatch = errors.New("idem: payload does not match the stored payload")
	// ErrLostOwnership: the caller's claim was taken over (its nonce no
	// longer matches), so its writes were refused.
	ErrLostOwnership = errors.New("idem: ownership lost")
	// ErrPreviousFailure: a previous run failed under OnFailure(Lock); the
	// stored failure is available as a *RecordedFailure.
	ErrPreviousFailure = errors.New("idem: previous run failed")
	// ErrResultUnavailable: the key completed but its result could not be
	// stored (it could not be encoded, its encoder panicked, or the store
	// refused it for good, as when it is over the store's size limit), so
	// a replay has nothing to return.
	ErrResultUnavailable = errors.New("idem: stored result unavailable")
	// ErrCorruptRecord: a stored record could not be decoded.
	ErrCorruptRecord = errors.New("idem: corrupt record")
	// ErrInvalidKey: the key is empty or cannot be canonicalised.
	ErrInvalidKey = errors.New("idem: invalid key")
	// ErrInvalidPayload: the value given to Payload cannot be canonicalised.
	ErrInvalidPayload = errors.New("idem: invalid payload")
	// ErrNotRecorded: fn ran and returned, but its outcome is known not to
	// be in the store and never to land there: no completion request can
	// have reached the store, or the record moved on to another claim (a
	// claim still in progress under the call's nonce is fenced off with a
	// new nonce before this is answered, so a delayed completion cannot
	// land afterwards). The result is returned alongside this error. (A store that refuses an outcome for good is
	// not this case: the record completes without the result, see
	// ErrResultUnavailable.)
	ErrNotRecorded = errors.New("idem: outcome not recorded")
	// ErrOutcomeUnknown: fn ran and returned, but whether its outcome was
	// recorded cannot be known: a completion may have reached the store
	// (its reply was lost or came too late) and the record could not be
	// read back to find out. The result is returned alongside this error.
	// Unlike ErrNotRecorded, the key may well replay this outcome.
	ErrOutcomeUnknown = errors.New("idem: outcome unknown")
	// ErrNotFound: the store has no live record for the key.
	ErrNotFound = errors.New("idem: record not found")
	// ErrInvalidOption: an option given to New is invalid.
	ErrInvalidOption = errors.New("idem: invalid option")
	// ErrPermanent marks a store failure that retrying cannot fix (a value
	// the backend rejects, such as an item over its size limit). A store
	// reports one as a *StoreError with Permanent set; the Guard then gives
	// up on recording an outcome at once instead of retrying it for the
	// takeover threshold. A refused completion is replaced by one without
	// the result (or, for a stored failure, with a short message), so the
	// key still ends and fn does not run again.
	ErrPermanent = errors.New("idem: permanent store failure")
)

// RecordedFailure is a failure recorded under OnFailure(Lock): the message
// and a type name, never a stack. It matches ErrPreviousFailure. (Not to be
// confused with StoreError, a failure of the store itself.)
type RecordedFailure struct {
	Message string `json:"message"`
	Type    string `json:"type,omitempty"`
}

func (e *RecordedFailure) Error() string {
	if e.Type == "" {
		return "idem: previous run failed: " + e.Message
	}
	return fmt.Sprintf("idem: previous run failed: %s (%s)", e.Message, e.Type)
}

// Is makes a RecordedFailure match ErrPreviousFailure.
func (e *RecordedFailure) Is(target error) bool { return target == ErrPreviousFailure }

// CorruptRecordError says which record could not be decoded and why. It
// matches ErrCorruptRecord.
type CorruptRecordError struct {
	Key string // storage key, when known
	Err error  // what the decoder said
}

func (e *CorruptRecordError) Error() string {
	if e.Key == "" {
		return "idem: corrupt record: " + e.Err.Error()
	}
	return fmt.Sprintf("idem: corrupt record %s: %v", e.Key, e.Err)
}

func (e *CorruptRecordError) Unwrap() error { return e.Err }

// Is makes a CorruptRecordError match ErrCorruptRecord.
func (e *CorruptRecordError) Is(target error) bool { return target == ErrCorruptRecord }

// KeyError describes why a key (or a payload) was rejected. It matches
// ErrInvalidKey, or ErrInvalidPayload when Payload is true.
type KeyError struct {
	Reason  string
	Err     error // underlying encoder error, if any
	Payload bool
}

func (e *KeyError) Error() string {
	what := "invalid key"
	if e.Payload {
		what = "invalid payload"
	}
	if e.Err != nil {
		return fmt.Sprintf("idem: %s: %s: %v", what, e.Reason, e.Err)
	}
	return fmt.Sprintf("idem: %s: %s", what, e.Reason)
}

func (e *KeyError) Unwrap() error { return e.Err }

// Is makes a KeyError match ErrInvalidKey or ErrInvalidPayload.
func (e *KeyError) Is(target error) bool {
	if e.Payload {
		return target == ErrInvalidPayload
	}
	return target == ErrInvalidKey
}

// DuplicateError is returned for a duplicate call. It matches ErrDuplicate,
// and ErrInProgress when the original call is still running.
type DuplicateError struct {
	StorageKey string
	Status     Status // status of the record that made this call a duplicate
	Attempt    int64
}

func (e *DuplicateError) Error() string {
	if e.Status == StatusInProgress {
		return "idem: duplicate call: operation in progress"
	}
	return "idem: duplicate call: key already " + string(e.Status)
}

// Is makes a DuplicateError match ErrDuplicate, and ErrInProgress when the
// record is in progress.
func (e *DuplicateError) Is(target error) bool {
	return target == ErrDuplicate || (target == ErrInProgress && e.Status == StatusInProgress)
}

// NotRecordedError wraps the store error that kept fn's outcome from being
// recorded. It matches ErrNotRecorded and unwraps to the store error.
type NotRecordedError struct{ Err error }

func (e *NotRecordedError) Error() string {
	return "idem: outcome not recorded: " + e.Err.Error()
}

func (e *NotRecordedError) Unwrap() error { return e.Err }

// Is makes a NotRecordedError match ErrNotRecorded.
func (e *NotRecordedError) Is(target error) bool { return target == ErrNotRecorded }

// OutcomeUnknownError says that a completion may or may not have been
// applied: Err is the last completion error, ReadErr why the record could
// not be read back. It matches ErrOutcomeUnknown and unwraps to both.
type OutcomeUnknownError struct{ Err, ReadErr error }

func (e *OutcomeUnknownError) Error() string {
	return fmt.Sprintf("idem: outcome unknown (it may or may not be recorded): %v; reading it back: %v", e.Err, e.ReadErr)
}

func (e *OutcomeUnknownError) Unwrap() []error { return []error{e.Err, e.ReadErr} }

// Is makes an OutcomeUnknownError match ErrOutcomeUnknown.
func (e *OutcomeUnknownError) Is(target error) bool { return target == ErrOutcomeUnknown }

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

// LapseError is the cause with which fn's context is cancelled when no
// heartbeat has succeeded for the takeover threshold minus half a heartbeat
// interval: the claim may be taken over at any moment, so fn should stop.
// It matches ErrLostOwnership. The outcome is still recorded if nobody did
// take the claim over. When fn returns an error after it, the call's error
// joins fn's error with the LapseError, so errors.Is(err, ErrLostOwnership)
// tells a call cut off by the Guard (safe to try again) from one given up
// by its own context; a failure recorded under Lock holds fn's error alone.
type LapseError struct {
	Since time.Duration // how long the claim went unrefreshed
}

func (e *LapseError) Error() string {
	return fmt.Sprintf("idem: claim not refreshed for %v; it may be taken over", e.Since)
}

// Is makes a LapseError match ErrLostOwnership.
func (e *LapseError) Is(target error) bool { return target == ErrLostOwnership }

// StoreError wraps a failure of the store in operation Op.
type StoreError struct {
	Op        string // claim, heartbeat, complete, release, get
	Err       error
	Permanent bool // retrying cannot help; matches ErrPermanent
}

func (e *StoreError) Error() string { return "idem: store " + e.Op + ": " + e.Err.Error() }

func (e *StoreError) Unwrap() error { return e.Err }

// Is makes a permanent StoreError match ErrPermanent.
func (e *StoreError) Is(target error) bool { return e.Permanent && target == ErrPermanent }
