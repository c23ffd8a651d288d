package storekit

import (
	"context"
	"errors"
	"time"
)

// TxClaim is the claim under which a store's transaction runs the work of a
// call (sqlstore.DoTx, dynamostore.DoTx) or of a step (their StepTx).
type TxClaim struct {
	Key     string // storage key of the record the transaction completes
	Nonce   string // the claim's nonce: the completion must be conditioned on it
	Attempt int64  // the claim's fencing token
	// TakeoverAfter is the Guard's takeover threshold: how long a runner
	// waits for a commit's reply before it reads the outcome back.
	TakeoverAfter time.Duration
}

// TxRunner runs the work of a claim inside a transaction of its store, so
// that the work's writes and the record's completion commit together.
type TxRunner interface {
	// RunTx begins a transaction, calls body with a context that carries
	// it (the store package's DoTx and StepTx hand it to the user's fn),
	// and, when body returns a completion, writes it in the same
	// transaction, conditioned on c.Nonce, and commits. It returns:
	//
	//   - body's error, unchanged, when body fails (rolled back);
	//   - nil when the transaction committed;
	//   - an error matching ErrLostOwnership when the record no longer
	//     carries c.Nonce (rolled back);
	//   - an error matching ErrOutcomeUnknown when it cannot learn, even
	//     by reading the record back, whether the commit applied;
	//   - any other error when nothing was committed, for certain.
	//
	// A panic in body rolls the transaction back and is raised again.
	RunTx(ctx context.Context, c TxClaim, body func(ctx context.Context) (Completion, error)) error
}

// TxOpener returns the TxRunner for store, the store of the Guard that
// runs the call, or an error matching ErrInvalidOption when the runner's
// transactions cannot hold that store's records.
type TxOpener func(store Store) (TxRunner, error)

type txKey struct{}

// WithTx returns a context that makes the Guard's Do (or idem.Step) it is
// passed to run its fn inside a transaction of open(store): the hook a
// store package builds its DoTx and StepTx on. The Guard asks open before
// it makes any store call, and hands fn a context without the opener, so
// that a Step inside fn is an ordinary step. WithTx(ctx, nil) removes it.
func WithTx(ctx context.Context, open TxOpener) context.Context {
	return context.WithValue(ctx, txKey{}, open)
}

// TxFrom returns the TxOpener that WithTx put in ctx, or nil.
func TxFrom(ctx context.Context) TxOpener {
	open, _ := ctx.Value(txKey{}).(TxOpener)
	return open
}

// TxClaimer is implemented by a TxRunner whose store can make a call's
// claim part of the transaction the call's work runs in (one commit): the
// claim, the work's writes and the completion commit together, or nothing
// does, so a crash, a lost connection or an error from the work leaves
// nothing that holds the key. The Guard uses it, instead of Store.Claim
// and RunTx, for a call (not a step) that has no previous secrets to
// settle against and whose failures are released (OnFailure(Unlock)).
type TxClaimer interface {
	// ClaimTx decides req's claim and, when the caller gets it (Claimed
	// or TookOver), holds the key for it until the returned OpenTx ends:
	// nothing is written until OpenTx.RunTx completes and commits, and
	// another ClaimTx of the key meanwhile waits (wait true) or returns
	// an error matching ErrKeyBusy (wait false). A store that cannot
	// hold a key (DynamoDB) may instead answer Claimed at once and
	// condition the commit on the key having no record: RunTx then
	// returns an error matching ErrLostOwnership when another caller's
	// record came first, and nothing of this call was written; asked
	// again, ClaimTx answers with that record (Existing). Existing: the
	// record that answers the call, nothing is held, OpenTx is nil.
	// ErrClaimFirst: claim with Store.Claim instead. A caller that gets
	// the claim must end the OpenTx: RunTx, or Rollback.
	ClaimTx(ctx context.Context, req ClaimRequest, wait bool) (ClaimResult, OpenTx, error)
}

// OpenTx is a claim a TxClaimer holds for its caller, not yet written.
type OpenTx interface {
	// RunTx runs the work in a transaction that writes the claim's record
	// with its completion and commits (see TxRunner); it ends the OpenTx.
	TxRunner
	// Rollback ends the OpenTx without writing anything (a no-op once it
	// has ended).
	Rollback()
}

// ErrClaimFirst is ClaimTx's answer when the call must be claimed as it
// is without a TxClaimer: by Store.Claim, committed on its own, before its
// transaction runs (for example a store that claims a key inside its
// transaction only while the key has no record, and has found one).
var ErrClaimFirst = errors.New("storekit: the claim must be committed before the transaction")

// ErrKeyBusy is ClaimTx's answer, without waiting, when another caller's
// open transaction holds the key: that call is in progress, and its
// record is not written yet.
var ErrKeyBusy = errors.New("storekit: the key is held by an open transaction")

type stepsKey struct{}

// RefuseSteps returns a context in which idem.Step is refused with an
// error matching ErrInvalidOption that says why: a store hands it to a
// call's fn when a step's record could not be trusted to belong to the one
// run of the call (two runs of fn may be live at once).
func RefuseSteps(ctx context.Context, why string) context.Context {
	return context.WithValue(ctx, stepsKey{}, why)
}

// StepsRefused returns why RefuseSteps refused steps in ctx, if it did.
func StepsRefused(ctx context.Context) (why string, refused bool) {
	why, refused = ctx.Value(stepsKey{}).(string)
	return why, refused
}
