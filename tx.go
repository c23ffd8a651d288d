package idem

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/idem-go/idem/storekit"
)

// TxClaim is the claim a call holds while a store's transaction runner
// (RunTx) runs fn inside a transaction.
type TxClaim[T any] struct {
	Key     string // storage key of the call
	Nonce   string // the claim's nonce: the completion must be conditioned on it
	Attempt int64  // the fencing token

	g *Guard[T]
	c *claim

	mu   sync.Mutex
	comp *storekit.Completion // what Complete returned, for the flight's followers
}

// Complete stops the claim's heartbeat and returns the completion to write
// for v (status completed, the Guard's codec and sanitizer applied, the
// Guard's TTL; a value that cannot be encoded gives a completion without a
// result, as Do does). It returns an error matching ErrLostOwnership when
// the claim was already lost. Call it after fn returned, right before
// writing the completed record inside the transaction. It does not cancel
// the context handed to the runner, which the transaction may still use.
func (tc *TxClaim[T]) Complete(v T) (storekit.Completion, error) {
	if tc == nil || tc.c == nil {
		return storekit.Completion{}, &storekit.OptionError{Option: "TxClaim.Complete", Reason: "not a claim handed out by RunTx"}
	}
	if tc.c.stopHeartbeat() {
		return storekit.Completion{}, fmt.Errorf("idem: claim taken over: %w", ErrLostOwnership)
	}
	comp := tc.g.success(tc.c, v)
	tc.mu.Lock()
	tc.comp = &comp
	tc.mu.Unlock()
	return comp, nil
}

// RunTx runs a call like Do (key, duplicates, payload, waits, heartbeats,
// fencing token, observer events, local cache), but instead of calling fn
// and Store.Complete it calls run, which must run the user's fn inside a
// store transaction and, when fn succeeds, write c.Complete(v) conditioned
// on c.Nonce in the same transaction and commit. It is the hook a store
// package builds its DoTx on (sqlstore.DoTx, dynamostore.DoTx); users call
// those. run reports:
//
//   - fnErr != nil: fn failed; the transaction was rolled back. The Guard
//     applies OnFailure (Unlock: release; Lock: record the failure with
//     Store.Complete outside the transaction).
//   - fnErr == nil, commitErr == nil: committed; the call completed.
//   - commitErr matching ErrLostOwnership: rolled back (the nonce no longer
//     matched); RunTx returns an error matching ErrLostOwnership; nothing
//     is released.
//   - commitErr matching ErrOutcomeUnknown (an *OutcomeUnknownError): the
//     runner could not learn whether the commit applied even after reading
//     back; returned as is, with v; the claim is left to go stale.
//   - any other commitErr: nothing was committed, for certain (the runner
//     rolled back, or read back and saw its nonce still in progress in a
//     way that excludes a late commit); the Guard releases the claim and
//     returns a *StoreError{Op: "commit"} wrapping it, so a retry runs fn
//     again.
//
// When nothing was committed (a lost claim, a failed commit) RunTx returns
// T's zero value. A panic in run (fn's panic) is handled as in Do: the
// runner rolls back in a deferred function, the Guard releases the claim
// and re-panics. The ctx handed to run carries the fencing token (and the
// call, for Step) and is cancelled when the claim is lost, as fn's ctx in
// Do.
//
// A nil or zero Guard, a nil ctx or a nil run is an error matching
// ErrInvalidOption.
func RunTx[T any](ctx context.Context, g *Guard[T], key string,
	run func(ctx context.Context, c *TxClaim[T]) (v T, fnErr, commitErr error),
	opts ...CallOption) (T, error) {
	if err := g.check(ctx, "RunTx"); err != nil {
		var zero T
		return zero, err
	}
	if run == nil {
		var zero T
		return zero, errNilFunc("RunTx")
	}
	return g.call(ctx, key, opts, nil, run)
}

// txOut is what a transaction runner returned.
type txOut[T any] struct {
	v                T
	fnErr, commitErr error
}

// runTx runs a transaction runner under the claim c and ends the claim as
// its outcome says (see RunTx).
func (g *Guard[T]) runTx(c *claim, run txRunner[T]) (T, error) {
	var zero T
	tc := &TxClaim[T]{Key: c.sk, Nonce: c.rec.Nonce, Attempt: c.rec.Attempt, g: g, c: c}
	out, _ := guarded(c, func(ctx context.Context) (txOut[T], error) {
		v, fnErr, commitErr := run(ctx, tc)
		return txOut[T]{v, fnErr, commitErr}, nil
	})
	interrupted := c.fctx.Err() != nil
	lost := c.end()
	switch {
	case out.fnErr != nil:
		if lost {
			c.observe(EventLostOwnership, nil)
			return out.v, joinErr(ErrLostOwnership, out.fnErr)
		}
		c.observe(EventFailure, out.fnErr)
		return out.v, c.fail(out.fnErr, interrupted)
	case out.commitErr == nil:
		c.observe(EventComplete, nil)
		tc.mu.Lock()
		if tc.comp != nil {
			c.completed(*tc.comp)
		}
		tc.mu.Unlock()
		return out.v, nil
	case errors.Is(out.commitErr, ErrLostOwnership):
		c.observe(EventLostOwnership, nil)
		return zero, fmt.Errorf("idem: commit refused: %w", out.commitErr)
	case errors.Is(out.commitErr, ErrOutcomeUnknown):
		c.observe(EventNotRecorded, out.commitErr)
		return out.v, out.commitErr
	default:
		c.observe(EventFailure, out.commitErr)
		return zero, joinErr(&StoreError{Op: "commit", Err: out.commitErr}, c.release())
	}
}
