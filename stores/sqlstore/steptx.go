package sqlstore

import (
	"context"
	"database/sql"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

// StepTx runs fn as a recorded step of the guarded call whose context is
// ctx (see idem.Step), inside a database transaction on the call's store,
// and writes the step's completed record in the same transaction,
// conditioned on the step claim's nonce, before it commits: fn's writes
// and the step's outcome commit together or not at all. PostgreSQL,
// MySQL/MariaDB and SQLite.
//
// The step is claimed, replayed and waited for as a Step: the first
// attempt of the call that reaches it claims it (one round trip, on a
// connection of its own, before the transaction begins), then runs fn in
// the transaction; a later attempt (a takeover after a crash or a pause, a
// retry) and a second StepTx of the same name in one attempt get the
// recorded value without running fn (one round trip); a live owner's step
// in flight is waited for. Inside fn, idem.StepKey and idem.FencingToken
// are the step's. What the caller is told:
//
//   - fn returned an error: the transaction is rolled back, the step's
//     claim is released and fn's error is returned (nothing is recorded;
//     the call's fn decides).
//   - fn succeeded and the commit was acknowledged: the value, nil.
//   - the step's claim was lost (taken over by another attempt while fn
//     ran: the completion's nonce condition matched no row): rolled back,
//     an error matching storekit.ErrLostOwnership; nothing of fn's is visible.
//   - the commit failed or its reply never came: the step's record is read
//     back as DoTx does (a locking read on another connection). Committed:
//     the value. Not committed, for certain: the claim is released and the
//     caller gets a *storekit.StoreError{Op: "commit"}, so a later attempt runs
//     fn again. Unknown (the read failed): an error matching
//     storekit.ErrOutcomeUnknown, never a guess, and the step's claim is left
//     to go stale.
//
// A crash before the commit leaves neither fn's writes nor the record: the
// step's claim goes stale and a later attempt runs fn again, once. So the
// database writes of a call commit exactly once, and no transaction is
// held open while the call's other steps (external calls) run: a checkout
// is Do { Step charge, Step email, StepTx order }.
//
// The call's store must be a *Store or the *WatchingStore of its Listen
// (any other store is an error matching storekit.ErrInvalidOption, before any
// store call); outside a guarded fn, or inside a step's fn, the error is
// idem.ErrNoCall; a nil fn is an error matching storekit.ErrInvalidOption. fn
// must do its writes through tx, in the store's database, and must not
// write the record table. The step's heartbeat runs on another connection
// of the pool while fn runs, so the pool should allow two connections.
//
// Cost: a StepTx that runs is its claim plus its transaction with the
// completion UPDATE inside it (BEGIN, fn's statements, the UPDATE,
// COMMIT), no statement more; replayed, 1 round trip (TestStepTxRoundTrips).
func StepTx[V any](ctx context.Context, name string, fn func(context.Context, *sql.Tx) (V, error)) (V, error) {
	var zero V
	switch {
	case fn == nil:
		return zero, &storekit.OptionError{Option: "StepTx", Reason: "nil fn"}
	case ctx == nil:
		return zero, &storekit.OptionError{Option: "StepTx", Reason: "context is nil"}
	}
	return idem.Step(storekit.WithTx(ctx, opener("StepTx", false)), name, func(ctx context.Context) (V, error) {
		return fn(ctx, txOf(ctx))
	})
}
