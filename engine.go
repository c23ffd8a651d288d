package idem

import (
	"context"
	"fmt"
	"time"

	"github.com/idem-go/idem/storekit"
)

// engine is the part of a Guard that does not depend on its result type:
// what a claim (of a call or of a step) needs.
type engine struct {
	store    storekit.Store
	watcher  storekit.Watcher // nil if the store cannot push changes
	keys     keyer
	prev     []keyer // WithSecret's previous secrets, looked under before fn runs
	ttl      time.Duration
	lease    time.Duration // lifetime of an in-progress record
	dup      DuplicatePolicy
	fail     FailurePolicy
	beat     time.Duration
	takeover time.Duration
	tenant   string // WithNamespace, handed to the store with each claim
	scope    string
	observer Observer
	codec    Codec
	errType  func(error) string
	presence bool   // the store can tell a dead owner (storekit.Presence with a token)
	owner    string // this process in claims (storekit.FormatOwner: WithInstanceID, incarnation, the store's Presence token)
}

// flight is the one store interaction for a key that all callers of it in
// this process share: one claim (and the fn it runs), or one wait.
type flight struct {
	payloadHash string
	running     bool             // the flight holds a claim and fn runs; set before decided fires
	final       *storekit.Record // set before done fires: the record that decides for followers, or nil
	// What followers wait for, guarded by the Guard's mu. A signal makes
	// its channel only when a follower waits on it, so a flight that has
	// none (nearly every replay) allocates no channel.
	decided signal // fn runs, or the flight has finished
	waiting signal // the flight waits on a live claim with its payload
	done    signal // the flight has finished
	// lapsed fires when the claim fn runs under may have lapsed: the
	// flight no longer speaks for the key (it has left the Guard's map),
	// and its followers ask the store, as a caller elsewhere would.
	lapsed signal
}

// signal is an event that fires once, with a channel made on demand.
type signal struct {
	ch    chan struct{}
	fired bool
}

// fire marks the signal fired and wakes whoever waits. Call it under the
// Guard's mu.
func (s *signal) fire() {
	if s.fired {
		return
	}
	s.fired = true
	if s.ch != nil {
		close(s.ch)
	}
}

// wait returns a channel closed once the signal fired. Call it under the
// Guard's mu.
func (s *signal) wait() <-chan struct{} {
	if s.ch == nil {
		s.ch = make(chan struct{})
		if s.fired {
			close(s.ch)
		}
	}
	return s.ch
}

type fencingKey struct{}

// FencingToken returns the attempt number of the claim under which fn runs
// (1, then one more for each takeover or re-claim while the record is
// kept), for a downstream system that rejects a token lower than one it has
// seen.
func FencingToken(ctx context.Context) (int64, bool) {
	t, ok := ctx.Value(fencingKey{}).(int64)
	return t, ok
}

// waitCancelled is the error of a caller whose context ended while the key
// was still being worked on.
func waitCancelled(ctx context.Context) error {
	return fmt.Errorf("%w: %w", ErrInProgress, context.Cause(ctx))
}

// decodeResult decodes the result of a completed record with codec.
func decodeResult[V any](codec Codec, rec *storekit.Record) (v V, err error) {
	if rec.Error != nil {
		return v, fmt.Errorf("%w: %s", ErrResultUnavailable, rec.Error.Message)
	}
	if err := codec.Unmarshal(rec.Result, &v); err != nil {
		return v, &storekit.CorruptRecordError{Key: rec.Key, Err: fmt.Errorf("result does not decode: %w", err)}
	}
	return v, nil
}

func (e *engine) observe(ctx context.Context, ev Event) {
	if e.observer != nil {
		ev.Scope = e.scope
		e.observer(ctx, ev)
	}
}
