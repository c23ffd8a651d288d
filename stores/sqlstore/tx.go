package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

// DoTx runs fn like g.Do, inside a database transaction on the Guard's
// store, and writes the completed record in the same transaction,
// conditioned on the claim's nonce, before it commits: fn's writes and the
// outcome commit together or not at all. The Guard's store must be a
// *Store or the *WatchingStore of its Listen (any other store, a nil Guard
// or a nil fn is an error matching storekit.ErrInvalidOption). PostgreSQL,
// MySQL/MariaDB and SQLite (where fn's transaction holds the database's
// write lock, so a Step inside fn is refused at once).
//
// fn must do its writes through tx, in the store's database. Duplicates,
// payloads, waits and heartbeats are as in Do. What the caller is told:
//
//   - fn returned an error: the transaction is rolled back and the Guard's
//     OnFailure applies (Unlock: the claim is released; Lock: the failure
//     is recorded after the rollback, outside the transaction).
//   - fn succeeded and the commit was acknowledged: the value, nil.
//   - the claim was lost (taken over by another caller while fn ran; the
//     completion's nonce condition matched no row): rolled back, an error
//     matching storekit.ErrLostOwnership; nothing of fn's is visible.
//   - the commit failed, or its reply never came (a dropped connection, no
//     answer within the takeover threshold): the record row is read back
//     with a locking read (SELECT ... FOR UPDATE) on another connection,
//     which the database answers only once the transaction holding the
//     row's lock has ended, committed or not. Completed with the call's
//     nonce: the commit applied, and the caller gets the value. Still in
//     progress with the call's nonce: the transaction ended without
//     committing, for certain, the claim is released and the caller gets a
//     *storekit.StoreError{Op: "commit"}, so a retry runs fn again. If the read
//     itself fails, the error matches storekit.ErrOutcomeUnknown (never a
//     guess) and the claim is left to go stale.
//
// # DoTx or StepTx
//
// DoTx holds its transaction open for the whole of fn: use it when the
// whole call is one database transaction, with no external call inside.
// When a call makes external calls (a payment provider, an e-mail) and
// writes to the database, use g.Do with idem.Step for each external call
// and StepTx for the database writes: the writes commit exactly once with
// the step's record, and no transaction is held open (nor a pooled
// connection idle in it) while a provider answers. A Step inside DoTx's fn
// needs a second connection of the pool for the step's records while fn's
// transaction holds one: on a pool limited to one connection
// (SetMaxOpenConns(1)) such a Step is refused at once with an error
// matching storekit.ErrInvalidOption, which says so, instead of waiting for
// the connection until the call's claim lapses (TestDoTxStepOneConnection).
// DoTx's own heartbeat, too, needs a second connection while fn's
// transaction is open: a fn that runs longer than the heartbeat interval
// wants a pool of at least two.
//
// A panic in fn rolls the transaction back, releases the claim and is
// raised again. The context handed to fn is the transaction's: it carries
// the fencing token (idem.FencingToken) and is cancelled when the claim is
// lost, which rolls the transaction back (database/sql does that for a
// transaction whose context ends).
//
// # Locks
//
// The claim, the heartbeats and any release are statements of their own,
// on other connections of the pool, each holding the record row's lock
// only while it runs. fn's transaction takes no lock on the record row
// while fn runs, so the heartbeat, which keeps the claim alive meanwhile,
// never waits for fn. When fn has returned, the heartbeat is stopped
// (the Guard halts it before it hands over the completion) before the
// transaction's completion UPDATE takes the record row's lock, which it
// holds until the commit or rollback: a claim of the same key meanwhile
// that would write the row (a takeover attempt, MariaDB's claim, whose
// no-op update locks the row) waits for that lock and then sees the
// outcome; one that only reads (PostgreSQL's duplicate of a live claim)
// sees the claim in progress. Whatever locks fn takes on its own rows are its own; fn
// must not write the record table. The read-back after a failed commit
// takes the record row's lock (FOR UPDATE) on another connection, for the
// length of one statement.
//
// # Cost
//
// On top of fn's statements: the claim (one round trip, before the
// transaction), BEGIN and COMMIT (database/sql sends each as a round trip),
// and one statement in the transaction, the completion UPDATE. A plain
// transaction doing fn's writes costs BEGIN, the writes and COMMIT; DoTx
// adds the claim and the completion (TestDoTxRoundTrips).
func DoTx[T any](ctx context.Context, g *idem.Guard[T], key string, fn func(context.Context, *sql.Tx) (T, error), opts ...idem.CallOption) (T, error) {
	var zero T
	switch {
	case g == nil:
		return zero, &storekit.OptionError{Option: "DoTx", Reason: "nil Guard"}
	case fn == nil:
		return zero, &storekit.OptionError{Option: "DoTx", Reason: "nil fn"}
	case ctx == nil:
		return zero, &storekit.OptionError{Option: "DoTx", Reason: "context is nil"}
	}
	return g.Do(storekit.WithTx(ctx, opener("DoTx", true)), key, func(ctx context.Context) (T, error) {
		return fn(ctx, txOf(ctx))
	}, opts...)
}

// opener returns the storekit.TxOpener of DoTx (call set) or StepTx (op
// names it in errors): a runner on the Guard's store, which must be a
// *Store or the *WatchingStore of its Listen.
func opener(op string, call bool) storekit.TxOpener {
	return func(st storekit.Store) (storekit.TxRunner, error) {
		var s *Store
		switch st := st.(type) {
		case *Store:
			s = st
		case *WatchingStore:
			if st != nil {
				s = st.Store
			}
		}
		if s == nil || s.db == nil {
			return nil, &storekit.OptionError{Option: op, Reason: fmt.Sprintf("the Guard's store is %T, not a *sqlstore.Store", st)}
		}
		return txRunner{s: s, call: call}, nil
	}
}

// txRunner is DoTx's and StepTx's storekit.TxRunner.
type txRunner struct {
	s    *Store
	call bool // DoTx's (not a step's)
}

type txCtxKey struct{}

// txOf returns the transaction a txRunner put in ctx.
func txOf(ctx context.Context) *sql.Tx {
	tx, _ := ctx.Value(txCtxKey{}).(*sql.Tx)
	return tx
}

// RunTx runs body in a transaction of the store, with the completion it
// returns written by the completion UPDATE inside it, conditioned on the
// claim's nonce (see storekit.TxRunner for what it returns).
func (r txRunner) RunTx(ctx context.Context, c storekit.TxClaim, body func(context.Context) (storekit.Completion, error)) error {
	s, commitWait := r.s, c.TakeoverAfter
	if r.call && (s.db.Stats().MaxOpenConnections == 1 || s.dialect == SQLite) {
		// fn's transaction holds the pool's only connection: a claim
		// on this pool from inside fn (a Step) is refused at once
		// (see soleConnection) instead of waiting for it until the
		// claim lapses.
		ctx = context.WithValue(ctx, soleConnKey{}, s.db)
	}
	// The completion statement is prepared (once per store) before the
	// transaction holds a connection, so that a pool of one connection
	// does not wait for itself; inside the transaction database/sql
	// prepares it on the transaction's connection once.
	complete, err := s.stmt(ctx, stCompleteTx)
	if err != nil {
		return storeErr("complete", err)
	}
	_ = s.checkPacket(ctx, 0) // MySQL: reads max_allowed_packet once, outside the transaction
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	tx, err := s.begin(tctx)
	if err != nil {
		return lostOr(ctx, err)
	}
	ended := false
	defer func() {
		if !ended { // fn panicked
			_ = tx.Rollback()
		}
	}()
	comp, err := body(context.WithValue(tctx, txCtxKey{}, tx))
	if err != nil {
		ended = true
		_ = tx.Rollback()
		return err
	}
	// The completion and the commit are given the takeover threshold
	// (at least a second) to be answered. Then the transaction's context
	// is cancelled, which closes its connection (pgx, and the MySQL driver
	// inside a statement) or at least stops waiting for it (the MySQL
	// driver does not watch the context during COMMIT: the commit's
	// goroutine is left to end with its connection), and the record is
	// read back: the server either has the COMMIT, or the transaction
	// ends without one when its connection does.
	timer := time.AfterFunc(max(commitWait, time.Second), cancel)
	defer timer.Stop()
	connID, err := s.completeTx(tctx, tx, complete, c.Key, c.Nonce, comp)
	if err != nil {
		ended = true
		_ = tx.Rollback() // no COMMIT was sent: nothing is committed
		return lostOr(ctx, err)
	}
	ended = true
	if err = s.commit(ctx, tctx, tx, connID, commitWait); err == nil {
		return nil
	}
	committed, rerr := s.readBack(ctx, c.Key, c.Nonce, err, commitWait)
	if committed {
		return nil
	}
	return rerr
}

// begin starts the transaction DoTx's fn runs in. On SQLite it takes
// the database's write lock before fn reads (see sqlite.go).
func (s *Store) begin(ctx context.Context) (*sql.Tx, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, storeErr("begin", err)
	}
	if s.dialect == SQLite {
		if _, err := tx.ExecContext(ctx, s.q.liteLock); err != nil {
			_ = tx.Rollback()
			return nil, storeErr("begin", err)
		}
	}
	return tx, nil
}

// commit commits tx, begun with tctx, and waits for the reply until tctx
// ends (runTx cancels it when the commit goes unanswered for the takeover
// threshold). On MySQL an unanswered COMMIT's connection, connID, is then
// killed from the server's side: the driver does not watch the context
// during COMMIT, so the transaction either has committed or rolls back
// now, and the goroutine waiting for the reply ends with it. ctx is the
// call's context, which the KILL outlives.
func (s *Store) commit(ctx, tctx context.Context, tx *sql.Tx, connID int64, commitWait time.Duration) error {
	done := make(chan error, 1)
	go func() { done <- tx.Commit() }()
	select {
	case err := <-done:
		return err
	case <-tctx.Done():
	}
	select {
	case err := <-done:
		return err
	default:
	}
	if s.dialect == MySQL {
		kctx, kcancel := context.WithTimeout(context.WithoutCancel(ctx), max(commitWait, time.Second))
		_, _ = s.db.ExecContext(kctx, fmt.Sprintf("KILL CONNECTION %d", connID))
		kcancel()
	}
	return fmt.Errorf("sqlstore: no reply to the commit: %w", tctx.Err())
}

// lostOr returns the cause of ctx's end when it is the claim's loss (the
// Guard cancels the call's context with it), else err: a transaction that
// failed because the claim was lost is reported as the loss.
func lostOr(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); cause != nil && errors.Is(cause, storekit.ErrLostOwnership) {
		return cause
	}
	return err
}

// completeTx writes the completion inside tx with st (stCompleteTx),
// conditioned on the nonce: on PostgreSQL the Complete statement itself
// (its notification is sent at the commit). No matched row is
// storekit.ErrLostOwnership. On MySQL it returns the connection's id.
func (s *Store) completeTx(ctx context.Context, tx *sql.Tx, st *sql.Stmt, key, nonce string, c storekit.Completion) (int64, error) {
	var msg, typ any
	if c.Error != nil {
		msg, typ = c.Error.Message, c.Error.Type
	}
	result := c.Result
	if len(result) == 0 {
		result = nil
	}
	if s.dialect == MySQL && s.maxPacket.Load() > 0 && // read before the transaction
		s.checkPacket(ctx, len(result)+len(key)+len(nonce)+statementSlack(c)) != nil {
		result = nil // as Do: completed without a result (replays: idem.ErrResultUnavailable)
	}
	var args []any
	if s.dialect != MySQL {
		args = append(s.keyArgs(key), nonce, string(c.Status), result, msg, typ, c.TTL.Milliseconds())
	} else {
		args = append(append([]any{string(c.Status), result, msg, typ, c.TTL.Milliseconds()},
			s.keyArgs(key)...), nonce)
	}
	res, err := tx.StmtContext(ctx, st).ExecContext(ctx, args...)
	var n int64
	if err == nil {
		if s.dialect == MySQL {
			n, err = res.LastInsertId() // the connection id of a matched row, else 0
		} else {
			n, err = res.RowsAffected()
		}
	}
	if err != nil {
		return 0, storeErr("complete", err)
	}
	if n == 0 {
		return 0, fmt.Errorf("sqlstore: complete %s: %w", key, storekit.ErrLostOwnership)
	}
	return n, nil
}

// errNotCommitted is the commit error when the read-back found the
// transaction ended without committing.
var errNotCommitted = errors.New("sqlstore: the transaction did not commit (read back: the claim is still in progress)")

// readBack learns whether a transaction whose commit failed committed its
// completion, with a locking read of the record row, which waits for the
// transaction holding the row's lock (ours, if its COMMIT is still on its
// way) to end. It reports committed, or else the commit error to return:
// storekit.ErrLostOwnership (another claim holds the row), errNotCommitted
// (our claim still in progress: the transaction ended without a commit),
// or an *storekit.OutcomeUnknownError when the row could not be read.
func (s *Store) readBack(ctx context.Context, key, nonce string, cerr error, wait time.Duration) (bool, error) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), max(4*wait, 10*time.Second))
	defer cancel()
	var gotNonce, status string
	err := retryTransient(rctx, func() error {
		return s.db.QueryRowContext(rctx, s.q.readBack, s.keyArgs(key)...).Scan(&gotNonce, &status)
	})
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return false, fmt.Errorf("sqlstore: commit %s: the record is gone: %w", key, storekit.ErrLostOwnership)
	case err != nil:
		return false, &storekit.OutcomeUnknownError{Err: storeErr("commit", cerr), ReadErr: storeErr("commit read-back", err)}
	case gotNonce != nonce:
		return false, fmt.Errorf("sqlstore: commit %s: %w", key, storekit.ErrLostOwnership)
	case status == string(storekit.StatusInProgress):
		return false, fmt.Errorf("%w: %w", errNotCommitted, cerr)
	default:
		return true, nil
	}
}

// soleConnKey marks the context DoTx hands to fn when the pool allows one
// connection, which fn's transaction holds; its value is the pool.
type soleConnKey struct{}

// soleConnection refuses a claim sent with ctx, the context of a DoTx's fn
// whose transaction holds the only connection of this store's pool: the
// claim (a Step's, or a nested call's) would wait for that connection
// until fn's own claim lapsed. A claim from any other context is nil.
func (s *Store) soleConnection(ctx context.Context) error {
	if db, _ := ctx.Value(soleConnKey{}).(*sql.DB); db == nil || db != s.db || (s.db.Stats().MaxOpenConnections != 1 && s.dialect != SQLite) {
		return nil
	}
	if s.dialect == SQLite {
		return &storekit.OptionError{Option: "DoTx", Reason: "a Step (or any claim on the same database) inside DoTx's fn on SQLite " +
			"needs the database's write lock, which fn's transaction holds until it commits: " +
			"use Do with Step for the external calls and StepTx for the database writes"}
	}
	return &storekit.OptionError{Option: "DoTx", Reason: "a Step (or any claim on the same pool) inside DoTx's fn needs a second " +
		"connection, and the pool allows one (SetMaxOpenConns(1)), held by fn's transaction: allow more connections, " +
		"or use Do with Step for the external calls and StepTx for the database writes"}
}
