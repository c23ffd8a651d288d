package storekit

import (
	"errors"
	"fmt"
)

// Errors a store returns, and the Guard hands on to its callers; package
// idem re-exports each under the same name, with the same value, so
// errors.Is matches either spelling.
var (
	// ErrLostOwnership: the caller's claim was taken over (its nonce no
	// longer matches), so its writes were refused.
	ErrLostOwnership = errors.New("idem: ownership lost")
	// ErrPreviousFailure: a previous run failed under OnFailure(Lock); the
	// stored failure is available as a *RecordedFailure.
	ErrPreviousFailure = errors.New("idem: previous run failed")
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

// OptionError says which option was rejected and why. It matches
// ErrInvalidOption. Every constructor of this repository (New here, every
// store's New, idemhttp.New, isr.NewCoordinator, ...) reports each invalid
// argument or option as one, all of them joined with errors.Join. Option
// names the option as Go spells it, qualified with its package outside
// package idem ("WithTTL", "memstore.WithRetention"); an invalid argument
// of a constructor is named after the constructor ("redisstore.New").
type OptionError struct {
	Option string
	Reason string
}

func (e *OptionError) Error() string { return "idem: " + e.Option + ": " + e.Reason }

// Is makes an OptionError match ErrInvalidOption.
func (e *OptionError) Is(target error) bool { return target == ErrInvalidOption }

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
