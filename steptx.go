package idem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idem-go/idem/storekit"
)

// StepTxClaim is the claim a step holds while a store's step transaction
// runner (RunStepTx) runs the step's fn inside a transaction.
type StepTxClaim[V any] struct {
	Key     string // storage key of the step's record
	Nonce   string // the step claim's nonce: the completion must be conditioned on it
	Attempt int64  // the step's fencing token

	// TakeoverAfter is the Guard's takeover threshold: how long a runner
	// waits for a commit's reply before it reads the outcome back.
	TakeoverAfter time.Duration

	c    *claim
	mu   sync.Mutex
	comp *storekit.Completion // what Complete returned, kept alive with the call once committed
}

// Complete stops the step claim's heartbeat and returns the completion to
// write for v (status completed, the Guard's codec, the Guard's TTL; a
// value that cannot be encoded gives a completion without a result, as
// Step does). It returns an error matching ErrLostOwnership when the step's
// claim was already lost. Call it after fn returned, right before writing
// the completed record inside the transaction.
func (tc *StepTxClaim[V]) Complete(v V) (storekit.Completion, error) {
	if tc == nil || tc.c == nil {
		return storekit.Completion{}, &storekit.OptionError{Option: "StepTxClaim.Complete", Reason: "not a claim handed out by RunStepTx"}
	}
	if tc.c.stopHeartbeat() {
		return storekit.Completion{}, fmt.Errorf("idem: step claim taken over: %w", ErrLostOwnership)
	}
	comp := tc.c.success(func() ([]byte, error) { return tc.c.e.codec.Marshal(v) })
	comp.TTL = tc.c.e.stepsLife()
	tc.mu.Lock()
	tc.comp = &comp
	tc.mu.Unlock()
	return comp, nil
}

// CallStore returns the store of the guarded call whose context is ctx (the
// context a Guard handed to fn), so that a store package's step
// transaction runner can check that the call is over one of its stores
// before it runs a step. Outside a guarded fn, or inside a step's fn, it
// returns ErrNoCall.
func CallStore(ctx context.Context) (storekit.Store, error) {
	if ctx == nil {
		return nil, &storekit.OptionError{Option: "CallStore", Reason: "context is nil"}
	}
	sc, err := stepCallOf(ctx, "CallStore", "")
	if err != nil {
		return nil, err
	}
	return sc.e.store, nil
}

// RunStepTx runs a step like Step (the same records, keys, replays, waits
// for a live owner, heartbeats, StepKey and fencing token), but instead of
// calling fn and recording its result it calls run under the step's claim;
// run must run the user's fn inside a store transaction and, when fn
// succeeds, write c.Complete(v) conditioned on c.Nonce in the same
// transaction and commit. It is the hook a store package builds its
// StepTx on (sqlstore.StepTx, dynamostore.StepTx); users call those. run
// reports as RunTx's runner does:
//
//   - fnErr != nil: fn failed; the transaction was rolled back; the step's
//     claim is released and fn's error returned, as Step does.
//   - fnErr == nil, commitErr == nil: committed; the step completed.
//   - commitErr matching ErrLostOwnership: rolled back (the step claim's
//     nonce no longer matched); an error matching ErrLostOwnership is
//     returned and nothing is released.
//   - commitErr matching ErrOutcomeUnknown: returned as is, with v; the
//     step's claim is left to go stale.
//   - any other commitErr: nothing was committed, for certain; the step's
//     claim is released and a *StoreError{Op: "commit"} wrapping it is
//     returned, so a later attempt runs the step again.
//
// A panic in run is handled as in Step (the claim is released and the
// panic raised again). The errors of Step apply to ctx, name and run.
func RunStepTx[V any](ctx context.Context, name string, run func(ctx context.Context, c *StepTxClaim[V]) (v V, fnErr, commitErr error)) (V, error) {
	var zero V
	switch {
	case ctx == nil:
		return zero, &storekit.OptionError{Option: "RunStepTx", Reason: "context is nil"}
	case run == nil:
		return zero, &storekit.OptionError{Option: "RunStepTx", Reason: "function is nil"}
	case name == "":
		return zero, &KeyError{Reason: "empty step name"}
	}
	sc, err := stepCallOf(ctx, "StepTx", name)
	if err != nil {
		return zero, err
	}
	s, err := newStep[V](ctx, sc, name)
	if err != nil {
		return zero, err
	}
	return s.do(ctx, func(c *claim) (V, error) { return s.runTx(c, run) })
}

// runTx runs a step transaction runner under the step's claim c and ends
// the claim as its outcome says (see RunStepTx).
func (s *step[V]) runTx(c *claim, run func(ctx context.Context, c *StepTxClaim[V]) (V, error, error)) (V, error) {
	var zero V
	tc := &StepTxClaim[V]{Key: c.sk, Nonce: c.rec.Nonce, Attempt: c.rec.Attempt, TakeoverAfter: c.e.takeover, c: c}
	c.announce(EventStepRun, EventStepRun)
	out, _ := guarded(c, func(ctx context.Context) (txOut[V], error) {
		v, fnErr, commitErr := run(ctx, tc)
		return txOut[V]{v, fnErr, commitErr}, nil
	})
	lost := c.end()
	switch {
	case out.fnErr != nil:
		if lost {
			return out.v, joinErr(ErrLostOwnership, out.fnErr)
		}
		return out.v, joinErr(c.cutOff(out.fnErr), c.release())
	case out.commitErr == nil:
		tc.mu.Lock()
		if tc.comp != nil {
			s.sc.keep(c.sk, c.rec.Nonce, *tc.comp)
		}
		tc.mu.Unlock()
		return out.v, nil
	case errors.Is(out.commitErr, ErrLostOwnership):
		c.observe(EventLostOwnership, nil)
		return zero, fmt.Errorf("idem: step commit refused: %w", out.commitErr)
	case errors.Is(out.commitErr, ErrOutcomeUnknown):
		c.observe(EventNotRecorded, out.commitErr)
		return out.v, out.commitErr
	default:
		return zero, joinErr(&StoreError{Op: "commit", Err: out.commitErr}, c.release())
	}
}
