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
// store, and writes the key's record with its outcome in the same
// transaction before it commits: the claim, fn's writes and the outcome
// commit together, in one commit, or not at all. The Guard's store must
// be a *Store or the *WatchingStore of its Listen (any other store, a nil
// Guard or a nil fn is an error matching storekit.ErrInvalidOption).
// PostgreSQL, MySQL/MariaDB and SQLite (where fn's transaction holds the
// database's write lock, so a Step inside fn is refused at once).
//
// # One commit
//
// The claim is read, and the key locked, on the connection fn's
// transaction then runs on, before BEGIN; nothing is written until the
// transaction's last statement writes the record with fn's outcome. So a
// crash, a lost connection, a failed commit or an error from fn leaves
// nothing that holds the key: the next attempt runs at once, with no claim
// to wait for or take over (TestDoTxOneCommitKills). A duplicate of a key
// whose transaction is open is, under Return and Raise, told the call is
// in progress without waiting; under Wait it waits for that transaction
// to end, then replays its outcome or, if it rolled back, runs fn
// (TestDoTxDuplicates; on SQLite every duplicate waits for the database's
// write lock). What this costs: while fn runs, only the key's lock (held
// by the database session) says the call is in progress, so an owner
// process that is stopped (SIGSTOP) or whose connection was cut while the
// server keeps its session holds the key until it goes on or the server
// ends the session: there is no takeover after the threshold, and no
// heartbeat; and an open DoTx has no record, so `idem ls`, `idem inspect`
// and Store.Get show nothing for its key until it commits. See
// onecommit.go for the statements. The claim is committed
// first, as a statement of its own (two commits, a heartbeat while fn
// runs, a takeover after the threshold), when the Guard has previous
// secrets (a rotation settles its claim first), under OnFailure(Lock) (the
// failure is recorded after the rollback, under that claim), and with
// WithClaimCommit. A Step inside fn records its outcome on another
// connection of the pool as it happens, so it survives a rollback of fn's
// transaction, and a later attempt replays it (TestDoTxStepOneCommit).
//
// fn must do its writes through tx, in the store's database. Payloads and
// waits are as in Do. What the caller is told:
//
//   - fn returned an error: the transaction is rolled back and the Guard's
//     OnFailure applies (Unlock: nothing is left; Lock: the failure is
//     recorded after the rollback, outside the transaction).
//   - fn succeeded and the commit was acknowledged: the value, nil.
//   - the record was written by another caller since the claim read it
//     (another owner's stale claim it took over completed meanwhile; or a
//     claim read that raced a commit of the key): rolled back, nothing of
//     fn's or of the claim committed, and the call looks at the key again,
//     so it is answered as a duplicate is (at most three times in a row;
//     then an error matching storekit.ErrLostOwnership). With the claim
//     committed first, a claim taken over while fn ran (the completion's
//     nonce condition matched no row): rolled back, an error matching
//     storekit.ErrLostOwnership; nothing of fn's is visible.
//   - the commit failed, or its reply never came (a dropped connection, no
//     answer within the takeover threshold): the record row is read back
//     with a locking read (SELECT ... FOR UPDATE) on another connection,
//     which the database answers only once the transaction holding the
//     row's lock has ended, committed or not. Completed with the call's
//     nonce: the commit applied, and the caller gets the value. Otherwise
//     the transaction ended without committing, for certain, and the
//     caller gets a *storekit.StoreError{Op: "commit"}, so a retry runs fn
//     again. If the read itself fails, the error matches
//     storekit.ErrOutcomeUnknown (never a guess).
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
// matching storekit.ErrInvalidOption, which says so
// (TestDoTxStepOneConnection).
//
// A panic in fn rolls the transaction back, ends the claim and is raised
// again. The context handed to fn is the transaction's: it carries the
// fencing token (idem.FencingToken).
//
// # Cost
//
// A fresh call: the claim read, BEGIN, fn's statements, the completion,
// COMMIT, so a plain transaction's round trips plus two (PostgreSQL; MySQL
// sends a third once DoTx has returned, which lets go of its GET_LOCK lock), and
// one commit. database/sql sends BEGIN and COMMIT as round trips of their
// own, so neither can carry the claim or the completion. A replay of a
// completed key: the claim read alone, one round trip
// (TestDoTxRoundTrips). With the claim committed first: the claim, BEGIN,
// fn's statements, the completion UPDATE, COMMIT: plus two, and two
// commits.
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
		if call && s.oneCommit() {
			return callRunner{txRunner{s: s, call: call}}, nil
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
	msg, typ := failureColumns(c.Error)
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
