package idem

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem/storekit"
)

// work is what runs under a claim: fn, and how its outcome becomes the
// claim's completion. A call of Do, a DoTx, a Step and a StepTx differ only
// in these fields, and runWork runs all four.
type work[V any] struct {
	fn func(context.Context) (V, error)
	// encode is the completion of fn's value: the Guard's codec (and
	// sanitizer, for a call) and the record's lifetime.
	encode func(c *claim, v V) storekit.Completion
	// tx, when set, runs fn inside a transaction of the store that
	// commits fn's writes and the completion together (storekit.WithTx).
	tx storekit.TxRunner
	// kept, when set, is told each completion recorded (a step keeps its
	// record alive with its call's).
	kept func(c *claim, comp storekit.Completion)
}

// openTx returns the transaction runner that ctx asks for (see
// storekit.WithTx) for the engine's store, nil when ctx asks for none, and
// ctx without the request, which the work's context inherits: a Step
// inside fn is an ordinary step.
func (e *engine) openTx(ctx context.Context) (context.Context, storekit.TxRunner, error) {
	open := storekit.TxFrom(ctx)
	if open == nil {
		return ctx, nil, nil
	}
	r, err := open(e.store)
	if err == nil && r == nil {
		err = &storekit.OptionError{Option: "storekit.WithTx", Reason: "the opener returned no runner"}
	}
	return storekit.WithTx(ctx, nil), r, err
}

// runWork runs w under the claim c, whose work has started (startWork),
// and ends the claim with its outcome: recorded when fn returns a value,
// released (a call under OnFailure(Lock): recorded as a failure) when it
// returns an error, released and raised again when it panics.
//
// A call reports its end to the observer; a step reports only what the
// caller cannot see (a loss or an unknown outcome of its commit). A step
// that fails is released whatever the failure policy: its error goes back
// to the call's fn, which decides.
func runWork[V any](c *claim, w work[V]) (V, error) {
	w.tx = c.runner(w.tx)
	var v V
	var fnErr, commitErr error
	var comp *storekit.Completion // what a transaction committed
	if w.tx == nil {
		v, fnErr = guarded(c, w.fn)
	} else {
		_, _ = guarded(c, func(ctx context.Context) (struct{}, error) {
			commitErr = w.tx.RunTx(ctx, c.txClaim(), func(ctx context.Context) (storekit.Completion, error) {
				if v, fnErr = w.fn(ctx); fnErr != nil {
					return storekit.Completion{}, fnErr
				}
				if c.stopHeartbeat() {
					return storekit.Completion{}, fmt.Errorf("idem: claim taken over: %w", ErrLostOwnership)
				}
				cp := w.encode(c, v)
				comp = &cp
				return cp, nil
			})
			return struct{}{}, nil
		})
		if fnErr != nil {
			commitErr = nil
		}
	}
	interrupted := c.fctx.Err() != nil // before end cancels fctx anyway
	lost := c.end()
	var zero V
	switch {
	case lost && (w.tx == nil || fnErr != nil):
		if !c.step {
			c.observe(EventLostOwnership, nil)
		}
		return v, joinErr(ErrLostOwnership, fnErr)
	case fnErr != nil:
		if c.step {
			return v, joinErr(c.cutOff(fnErr), c.release())
		}
		c.observe(EventFailure, fnErr)
		return v, c.fail(fnErr, interrupted)
	case w.tx == nil:
		if !c.step {
			c.observe(EventComplete, nil)
		}
		cp := w.encode(c, v)
		if err := c.complete(cp); err != nil {
			return v, err
		}
		if w.kept != nil {
			w.kept(c, cp)
		}
		return v, nil
	case commitErr == nil:
		if !c.step {
			c.observe(EventComplete, nil)
		}
		if comp != nil {
			c.completed(*comp)
			if w.kept != nil {
				w.kept(c, *comp)
			}
		}
		return v, nil
	case errors.Is(commitErr, ErrLostOwnership):
		c.refused = true
		c.observe(EventLostOwnership, nil)
		return zero, fmt.Errorf("idem: commit refused: %w", commitErr)
	case errors.Is(commitErr, ErrOutcomeUnknown):
		c.observe(EventNotRecorded, commitErr)
		return v, commitErr
	default:
		if !c.step {
			c.observe(EventFailure, commitErr)
		}
		return zero, joinErr(&StoreError{Op: "commit", Err: commitErr}, c.release())
	}
}

// txClaimer returns w's transaction runner as a storekit.TxClaimer when a
// call of w can be claimed inside its transaction (one commit): the runner
// offers it, the call has no previous secrets to settle its claim against
// (rotating), and a failure of fn is released, not recorded (under
// OnFailure(Lock) the failure is written after the rollback, under a claim
// made beforehand). Otherwise nil: the claim is a commit of its own.
func (e *engine) txClaimer(tx storekit.TxRunner, rotating bool) storekit.TxClaimer {
	tc, ok := tx.(storekit.TxClaimer)
	if !ok || rotating || e.fail != Unlock {
		return nil
	}
	return tc
}

// tryClaimTx is tryClaim inside a transaction of tc: the claim it returns
// is held by an open transaction (claim.otx), nothing written. A key that
// another open transaction holds is waited for under Wait and is
// storekit.ErrKeyBusy otherwise.
func (e *engine) tryClaimTx(ctx context.Context, tc storekit.TxClaimer, sk, ph string) (*claim, *storekit.Record, error) {
	sent := time.Now()
	res, otx, err := tc.ClaimTx(ctx, e.claimRequest(sk, ph), e.dup == Wait)
	switch {
	case errors.Is(err, storekit.ErrClaimFirst):
		return e.tryClaim(ctx, sk, ph)
	case errors.Is(err, storekit.ErrKeyBusy):
		return nil, nil, err
	case err != nil:
		return nil, nil, storeErr("claim", err)
	}
	c, rec, err := e.claimed(ctx, sk, ph, res, sent)
	if c == nil {
		if otx != nil {
			otx.Rollback()
		}
		return nil, rec, err
	}
	if otx == nil {
		return nil, nil, &StoreError{Op: "claim", Err: errors.New("store returned a claim without its transaction")}
	}
	c.otx = otx
	return c, nil, nil
}

// runner is the transaction runner the claim's work runs in: the
// transaction that holds the claim, if one does, else tx.
func (c *claim) runner(tx storekit.TxRunner) storekit.TxRunner {
	if c.otx != nil {
		return c.otx
	}
	return tx
}

// txClaim is the claim as a store's transaction runner sees it.
func (c *claim) txClaim() storekit.TxClaim {
	return storekit.TxClaim{Key: c.sk, Nonce: c.rec.Nonce, Attempt: c.rec.Attempt, TakeoverAfter: c.e.takeover}
}

// guarded runs fn under c as singleflight runs a function. fn can end in
// three ways. It returns: normalReturn is set. It panics: the deferred
// recover in the inner function catches it, so the claim is abandoned
// here, in fn's goroutine, and the panic is raised again (recovered is
// set). It calls runtime.Goexit: no recover sees that, the goroutine
// unwinds through the outer defer with neither flag set, and the claim is
// abandoned there. Either way nothing is recorded as a result.
func guarded[V any](c *claim, fn func(context.Context) (V, error)) (v V, err error) {
	normalReturn, recovered := false, false
	var panicValue any
	defer func() {
		if !normalReturn && !recovered { // runtime.Goexit in fn
			c.abandon(errors.New("fn called runtime.Goexit"))
		}
	}()
	func() {
		defer func() {
			if !normalReturn {
				panicValue = recover()
			}
		}()
		v, err = fn(c.fctx)
		normalReturn = true
	}()
	if !normalReturn {
		recovered = true
		c.abandon(fmt.Errorf("fn panicked: %v", panicValue))
		panic(panicValue)
	}
	return v, err
}
