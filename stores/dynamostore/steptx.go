package dynamostore

import (
	"context"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

// StepTx runs fn as a recorded step of the guarded call whose context is
// ctx (see idem.Step) and commits fn's writes, added to tx, together with
// the step's completed record in one TransactWriteItems, conditioned on
// the step claim's nonce: fn's writes and the step's outcome commit
// together or not at all.
//
// The step is claimed, replayed and waited for as a Step: the first
// attempt of the call that reaches it claims it (one round trip), runs fn
// and sends the transaction; a later attempt (a takeover after a crash or
// a pause, a retry) and a second StepTx of the same name in one attempt get
// the recorded value without running fn (one round trip); a live owner's
// step in flight is waited for. Inside fn, idem.StepKey and
// idem.FencingToken are the step's. What the caller is told is what DoTx
// tells, for the step:
//
//   - fn returned an error (or a Tx method refused an item): nothing is
//     sent, the step's claim is released and the error returned.
//   - the step's claim was lost: the nonce condition cancels the
//     transaction, nothing of fn's is written, and the error matches
//     storekit.ErrLostOwnership.
//   - one of fn's own conditions failed: nothing is written, the step's
//     claim is released, and the error is an *storekit.StoreError (Op
//     "commit") around a *TxCanceledError naming the item.
//   - the reply was lost: the transaction is fenced as in DoTx; not
//     applied, for certain: the claim is released and a later attempt runs
//     fn again; applied: the value; unknown: an error matching
//     storekit.ErrOutcomeUnknown, and the step's claim is left to go stale.
//
// A crash before the transaction is sent leaves neither fn's writes nor
// the record: a later attempt runs fn again. The call's store must be a
// *Store (any other store is an error matching storekit.ErrInvalidOption,
// before any store call); outside a guarded fn, or inside a step's fn, the
// error is idem.ErrNoCall; a nil fn is an error matching
// storekit.ErrInvalidOption. fn's items may be on any table of the same
// account and region, up to MaxTxItems of them.
//
// Cost: a StepTx that runs is its claim plus the TransactWriteItems (the
// record inside it), 2 requests; replayed, 1.
func StepTx[V any](ctx context.Context, name string, fn func(context.Context, *Tx) (V, error)) (V, error) {
	var zero V
	switch {
	case fn == nil:
		return zero, &storekit.OptionError{Option: "StepTx", Reason: "nil fn"}
	case ctx == nil:
		return zero, &storekit.OptionError{Option: "StepTx", Reason: "context is nil"}
	}
	return idem.Step(storekit.WithTx(ctx, opener("StepTx")), name, txFn(fn))
}
