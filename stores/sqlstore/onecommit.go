package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem/storekit"
)

// One commit: DoTx's claim inside its transaction (storekit.TxClaimer).
//
// The claim is read, and the key locked, before the transaction begins, on
// the connection the transaction then runs on; nothing is written until
// the transaction's last statement, which writes the claim's record with
// its outcome; the commit makes fn's writes and the record visible
// together. So:
//
//   - a fresh call sends the claim read, BEGIN, fn's statements, the
//     completion and COMMIT: a plain transaction's round trips plus two,
//     and one commit (the two-commit path costs the same round trips and
//     two commits). A replay of a completed key is the claim read alone:
//     one round trip, nothing locked.
//   - a crash, a lost connection, a failed commit or an error from fn
//     leaves nothing: the session's lock ends with its connection or is
//     let go at once, and the next attempt runs at once.
//   - a duplicate of a key whose transaction is open finds the key's lock
//     held: under Wait it waits for the lock (until that transaction ends,
//     committed or not) and reads the key again; under Return and Raise it
//     is told the call is in progress (storekit.ErrKeyBusy) without waiting.
//
// PostgreSQL: the lock is the key's advisory lock, the one the ordinary
// claim of a key it inserts and Delete take at transaction level, held
// here at session level from the claim read and turned into a
// transaction-level hold by the completion (complete_claim_tx.sql), so it
// ends with the commit. A Do of the same key while a DoTx holds it waits
// for it too, when its claim would insert the row.
//
// What it costs: while fn runs, the key's record is not written, so
// nothing but the lock says the call is in progress: a Wait duplicate
// blocks on the lock for as long as fn runs, a process that is stopped
// (SIGSTOP) holds the lock for as long as it is stopped (no takeover after
// the threshold: the server still holds its session), and a connection cut
// while the server keeps the session holds it until the server notices
// (its TCP keepalive or idle timeouts). A takeover of such a call is
// never needed: when the session ends, its lock ends, and the next caller
// finds nothing. A heartbeat has nothing to refresh, so none is sent.

// callRunner is DoTx's runner on a dialect with a one-commit claim.
type callRunner struct{ txRunner }

// oneCommit reports whether s's dialect claims inside DoTx's transaction.
func (s *Store) oneCommit() bool { return s.q.text[stCompleteClaimTx] != "" }

// ClaimTx implements storekit.TxClaimer (see above).
func (r callRunner) ClaimTx(ctx context.Context, req storekit.ClaimRequest, wait bool) (storekit.ClaimResult, storekit.OpenTx, error) {
	s := r.s
	if err := s.checkClaim(ctx, req); err != nil {
		return storekit.ClaimResult{}, nil, err
	}
	// Prepared before the connection is taken, so that a pool of one
	// connection does not wait for itself (as txRunner.RunTx).
	complete, err := s.stmt(ctx, stCompleteClaimTx)
	if err != nil {
		return storekit.ClaimResult{}, nil, storeErr("complete", err)
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return storekit.ClaimResult{}, nil, storeErr("claim", err)
	}
	for range maxClaimRounds {
		d, cur, held, err := s.claimReadTx(ctx, conn, req)
		switch {
		case err != nil:
			s.letGo(conn, req.Key, false)
			return storekit.ClaimResult{}, nil, err
		case held && d.Write:
			return s.openClaim(ctx, conn, complete, req, d, cur)
		case held || d.Outcome == storekit.Existing:
			s.letGo(conn, req.Key, held)
			return d.Result(), nil, nil
		case !wait:
			s.letGo(conn, req.Key, false)
			return storekit.ClaimResult{}, nil, fmt.Errorf("sqlstore: claim %s: %w", req.Key, storekit.ErrKeyBusy)
		}
		// Wait for the open transaction that holds the key, then read
		// the key again (the lock is let go: the read takes it again).
		if err := s.awaitKey(ctx, conn, req.Key); err != nil {
			s.letGo(conn, req.Key, false)
			return storekit.ClaimResult{}, nil, storeErr("claim", err)
		}
	}
	s.letGo(conn, req.Key, false)
	return storekit.ClaimResult{}, nil, storeErr("claim", ErrContention)
}

// claimReadTx sends the claim read (claim_tx.sql) on conn. It returns the
// decision on the row it read (storekit.DecideClaim; Write false and
// Outcome Claimed when the key's lock is held by another session and no
// row answers), the row (nil when there is none), and whether conn now
// holds the key's lock.
func (s *Store) claimReadTx(ctx context.Context, conn *sql.Conn, req storekit.ClaimRequest) (storekit.Decision, *storekit.Record, bool, error) {
	var (
		now   int64
		got   sql.NullBool
		found bool
		raw   rawRecord
	)
	err := conn.QueryRowContext(ctx, s.q.claimTx, req.Key).Scan(append([]any{&now, &got, &found}, raw.dest()...)...)
	if err != nil {
		return storekit.Decision{}, nil, false, storeErr("claim", err)
	}
	var cur *storekit.Record
	if found {
		if cur, err = raw.record(req.Key); err != nil {
			return storekit.Decision{}, nil, got.Bool, err
		}
	}
	if got.Valid && !got.Bool { // another session's open transaction holds the key
		if cur != nil && cur.Live(now) && cur.PayloadHash != req.PayloadHash {
			return storekit.Decision{Outcome: storekit.Existing, Record: cur}, cur, false, nil
		}
		return storekit.Decision{Outcome: storekit.Claimed}, cur, false, nil
	}
	return storekit.DecideClaim(cur, req, now), cur, got.Bool, nil
}

// awaitKey waits on conn for the key's lock, held by another session's
// open transaction, and lets go of it at once.
func (s *Store) awaitKey(ctx context.Context, conn *sql.Conn, key string) error {
	if _, err := conn.ExecContext(ctx, s.q.lockKey, key); err != nil {
		return err
	}
	_, err := conn.ExecContext(context.WithoutCancel(ctx), s.q.unlockKey, key)
	return err
}

// letGo returns conn to the pool, first letting go of the key's lock when
// conn holds it. A connection whose lock could not be let go is closed
// instead (its session, and the lock, end with it).
func (s *Store) letGo(conn *sql.Conn, key string, held bool) {
	if held {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := conn.ExecContext(ctx, s.q.unlockKey, key)
		cancel()
		if err != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}
	_ = conn.Close()
}

// openClaim begins the transaction of the claim d on conn, which holds the
// key's lock: the OpenTx the Guard runs fn in.
// cur is the row the claim read, nil when there was none.
func (s *Store) openClaim(ctx context.Context, conn *sql.Conn, complete *sql.Stmt, req storekit.ClaimRequest, d storekit.Decision, cur *storekit.Record) (storekit.ClaimResult, storekit.OpenTx, error) {
	tctx, cancel := context.WithCancel(ctx)
	tx, err := conn.BeginTx(tctx, nil)
	if err != nil {
		cancel()
		s.letGo(conn, req.Key, true)
		return storekit.ClaimResult{}, nil, storeErr("begin", err)
	}
	o := &openTx{s: s, conn: conn, tx: tx, complete: complete, tctx: tctx, cancel: cancel, req: req, rec: d.Record, prev: cur, took: d.Outcome == storekit.TookOver}
	return d.Result(), o, nil
}

// openTx is a one-commit claim: the transaction, begun on the connection
// that holds the key's lock, that runs fn and writes the record.
type openTx struct {
	s        *Store
	conn     *sql.Conn
	tx       *sql.Tx
	complete *sql.Stmt       // stCompleteClaimTx
	tctx     context.Context // the transaction's
	cancel   context.CancelFunc
	req      storekit.ClaimRequest
	rec      *storekit.Record // the claim as decided
	prev     *storekit.Record // the row it replaces, as read; nil when there was none
	took     bool             // the claim takes over a stale one
	ended    bool
}

// Rollback implements storekit.OpenTx.
func (o *openTx) Rollback() {
	if o.ended {
		return
	}
	o.ended = true
	_ = o.tx.Rollback()
	o.cancel()
	o.s.letGo(o.conn, o.req.Key, true)
}

// RunTx implements storekit.TxRunner: fn (body) runs in the open
// transaction, then the completion writes the record and the transaction
// commits (see storekit.TxRunner for what it returns).
func (o *openTx) RunTx(ctx context.Context, c storekit.TxClaim, body func(context.Context) (storekit.Completion, error)) error {
	s := o.s
	if s.db.Stats().MaxOpenConnections == 1 {
		ctx = context.WithValue(ctx, soleConnKey{}, s.db) // see txRunner.RunTx
	}
	defer o.Rollback() // fn panicked, or the completion failed: nothing is committed
	comp, err := body(context.WithValue(ctx, txCtxKey{}, o.tx))
	if err != nil {
		return err
	}
	timer := time.AfterFunc(max(c.TakeoverAfter, time.Second), o.cancel) // see txRunner.RunTx
	defer timer.Stop()
	if err := o.write(comp); err != nil {
		return lostOr(ctx, err)
	}
	o.ended = true
	err = s.commit(ctx, o.tctx, o.tx, 0, c.TakeoverAfter)
	o.cancel()
	if err == nil {
		_ = o.conn.Close() // the completion let go of the session's lock
		return nil
	}
	// The connection's state is unknown: it is closed, not pooled (its
	// session ends, and with it any lock it held).
	_ = o.conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = o.conn.Close()
	committed, rerr := s.readBack(ctx, c.Key, c.Nonce, err, c.TakeoverAfter)
	if committed {
		return nil
	}
	if errors.Is(rerr, storekit.ErrLostOwnership) { // no row, or another claim's: ours did not commit
		return fmt.Errorf("%w: %w", errNotCommitted, err)
	}
	return rerr
}

// write writes the claim's record with its completion c inside the
// transaction (complete_claim_tx.sql). A row that changed since the claim
// read it is storekit.ErrLostOwnership.
func (o *openTx) write(c storekit.Completion) error {
	var msg, typ any
	if c.Error != nil {
		msg, typ = c.Error.Message, c.Error.Type
	}
	result := c.Result
	if len(result) == 0 {
		result = nil
	}
	r, q := o.rec, o.req
	var prevNonce string
	var prevAttempt, prevBeat, prevExpires, tookAt int64
	if p := o.prev; p != nil {
		prevNonce, prevAttempt, prevBeat, prevExpires = p.Nonce, p.Attempt, p.HeartbeatAt, p.ExpiresAt
	}
	if o.took {
		tookAt = r.StartedAt
	}
	res, err := o.tx.StmtContext(o.tctx, o.complete).ExecContext(o.tctx, q.Tenant, q.Scope, q.Key, q.Nonce, q.PayloadHash,
		string(c.Status), result, msg, typ, c.TTL.Milliseconds(), r.Attempt, q.TakeoverAfter.Milliseconds(), q.Owner,
		prevNonce, prevAttempt, prevBeat, prevExpires, r.StartedAt, tookAt)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if err != nil {
		return storeErr("complete", err)
	}
	if n == 0 {
		return fmt.Errorf("sqlstore: complete %s: the record changed since the claim: %w", q.Key, storekit.ErrLostOwnership)
	}
	return nil
}
