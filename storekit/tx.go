package storekit

import (
	"context"
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
