package sqlstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
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
// MySQL/MariaDB: the lock is GET_LOCK of a name derived from the table and
// the key (claim_tx.sql), let go of by one more statement after the
// commit, once DoTx has returned (the connection is busy for a plain
// transaction plus three round trips, the caller for two), since MySQL has no
// lock that a transaction's commit ends: the row the completion writes is
// locked by its transaction until the commit, and a claim read that got
// the lock reads the row with a locking read, which waits for that commit.
//
// SQLite: the transaction holds the database's write lock from its first
// statement (BEGIN, then a write: see sqlite.go), and the claim reads the
// key inside it; every duplicate, under any policy, waits for the
// database's write lock (busy_timeout), as every other writer of the
// database does, and then reads what committed. A key's lock is the
// database's: Return and Raise cannot be told "in progress" without
// waiting, for SQLite's lock cannot say which key it is held for.
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

// beforeCommit, when set (by this package's process tests only), runs
// between a one-commit DoTx's completion and its COMMIT.
var beforeCommit func()

// callRunner is DoTx's runner: a txRunner that claims inside its
// transaction (storekit.TxClaimer).
type callRunner struct{ txRunner }

// oneCommit reports whether DoTx on s claims inside its transaction.
func (s *Store) oneCommit() bool { return !s.cfg.claimCommit }

// ClaimTx implements storekit.TxClaimer (see above).
func (r callRunner) ClaimTx(ctx context.Context, req storekit.ClaimRequest, wait bool) (storekit.ClaimResult, storekit.OpenTx, error) {
	s := r.s
	if err := s.checkClaim(ctx, req); err != nil {
		return storekit.ClaimResult{}, nil, err
	}
	if s.dialect == SQLite {
		return s.claimTxSQLite(ctx, req)
	}
	// Prepared before the connection is taken, so that a pool of one
	// connection does not wait for itself (as txRunner.RunTx).
	for _, id := range s.completeClaimStmts() {
		if _, err := s.stmt(ctx, id); err != nil {
			return storekit.ClaimResult{}, nil, storeErr("complete", err)
		}
	}
	_ = s.checkPacket(ctx, 0) // MySQL: reads max_allowed_packet once, outside the transaction
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return storekit.ClaimResult{}, nil, storeErr("claim", err)
	}
	k := keyLock{s: s, conn: conn, key: req.Key}
	for range maxClaimRounds {
		rd, err := k.read(ctx, req)
		switch {
		case err != nil:
			k.letGo(false)
			return storekit.ClaimResult{}, nil, err
		case rd.held && rd.d.Write:
			return s.openClaim(ctx, k, req, rd)
		case rd.held || rd.d.Outcome == storekit.Existing:
			k.letGo(rd.held)
			return rd.d.Result(), nil, nil
		case !wait:
			k.letGo(false)
			return storekit.ClaimResult{}, nil, fmt.Errorf("sqlstore: claim %s: %w", req.Key, storekit.ErrKeyBusy)
		}
		// Wait for the open transaction that holds the key, then read
		// the key again (the lock is let go: the read takes it again).
		if err := k.await(ctx); err != nil {
			k.letGo(false)
			return storekit.ClaimResult{}, nil, storeErr("claim", err)
		}
	}
	k.letGo(false)
	return storekit.ClaimResult{}, nil, storeErr("claim", ErrContention)
}

// completeClaimStmts are the statements a one-commit completion may send.
func (s *Store) completeClaimStmts() []stmtID {
	if s.dialect == MySQL {
		return []stmtID{stCompleteClaimTx, stCompleteClaimTxUpdate}
	}
	return []stmtID{stCompleteClaimTx}
}

// keyLock is a key's lock (PostgreSQL's advisory lock, MySQL's GET_LOCK)
// as a connection of the pool, pinned for the claim, takes and lets go of it.
type keyLock struct {
	s    *Store
	conn *sql.Conn
	key  string
}

// claimRead is what the claim read found.
type claimRead struct {
	d      storekit.Decision // DecideClaim on the row (Outcome Claimed, Write false: another session holds the key)
	cur    *storekit.Record  // the row, nil when there is none
	held   bool              // the connection now holds the key's lock
	connID int64             // MySQL: the session's id
}

// read sends the claim read (claim_tx.sql) on k's connection.
func (k keyLock) read(ctx context.Context, req storekit.ClaimRequest) (claimRead, error) {
	var (
		rd    claimRead
		now   int64
		got   sql.NullBool
		found bool
		raw   rawRecord
		row   *sql.Row
	)
	dest := []any{&got, &now, &found}
	if k.s.dialect == MySQL {
		dest = append(dest, &rd.connID)
		row = k.conn.QueryRowContext(ctx, k.mysqlText(k.s.q.claimTx))
	} else {
		row = k.conn.QueryRowContext(ctx, k.s.q.claimTx, req.Key)
	}
	if err := row.Scan(append(dest, raw.dest()...)...); err != nil {
		return rd, storeErr("claim", err)
	}
	rd.held = got.Bool
	if found {
		cur, err := raw.record(req.Key)
		if err != nil {
			return rd, err
		}
		rd.cur = cur
	}
	if got.Valid && !got.Bool { // another session's open transaction holds the key
		if rd.cur != nil && rd.cur.Live(now) && rd.cur.PayloadHash != req.PayloadHash {
			rd.d = storekit.Decision{Outcome: storekit.Existing, Record: rd.cur}
		} else {
			rd.d = storekit.Decision{Outcome: storekit.Claimed}
		}
		return rd, nil
	}
	rd.d = storekit.DecideClaim(rd.cur, req, now)
	return rd, nil
}

// mysqlText fills a MySQL statement's {{key}} and {{lock}} with literals:
// the key as a hex string literal, and its lock's name, hex digits.
func (k keyLock) mysqlText(text string) string {
	sum := sha256.Sum256([]byte(k.s.cfg.table + "\x00" + k.key))
	return strings.NewReplacer("{{key}}", "CONVERT(X'"+hex.EncodeToString([]byte(k.key))+"' USING utf8mb4) COLLATE utf8mb4_bin",
		"{{lock}}", "'idem:"+hex.EncodeToString(sum[:20])+"'").Replace(text)
}

// await waits for the key's lock, held by another session's open
// transaction, and lets go of it at once.
func (k keyLock) await(ctx context.Context) error {
	if err := k.exec(ctx, k.s.q.lockKey); err != nil {
		return err
	}
	return k.unlock(context.WithoutCancel(ctx))
}

// unlock lets go of the key's lock.
func (k keyLock) unlock(ctx context.Context) error { return k.exec(ctx, k.s.q.unlockKey) }

// exec sends the statement text about k's key on k's connection: the key
// as its argument on PostgreSQL, as literals on MySQL (mysqlText).
func (k keyLock) exec(ctx context.Context, text string) error {
	var err error
	if k.s.dialect == MySQL {
		_, err = k.conn.ExecContext(ctx, k.mysqlText(text))
	} else {
		_, err = k.conn.ExecContext(ctx, text, k.key)
	}
	return err
}

// letGo returns the connection to the pool, first letting go of the key's
// lock when it holds it. A connection whose lock could not be let go is
// closed instead (its session, and the lock, end with it).
func (k keyLock) letGo(held bool) {
	if held {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err := k.unlock(ctx)
		cancel()
		if err != nil {
			k.discard()
			return
		}
	}
	_ = k.conn.Close()
}

// discard closes the connection instead of returning it to the pool.
func (k keyLock) discard() {
	_ = k.conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = k.conn.Close()
}

// openClaim begins the transaction of the claim rd on k's connection,
// which holds the key's lock: the OpenTx the Guard runs fn in.
func (s *Store) openClaim(ctx context.Context, k keyLock, req storekit.ClaimRequest, rd claimRead) (storekit.ClaimResult, storekit.OpenTx, error) {
	tctx, cancel := context.WithCancel(ctx)
	tx, err := k.conn.BeginTx(tctx, nil)
	if err != nil {
		cancel()
		k.letGo(true)
		return storekit.ClaimResult{}, nil, storeErr("begin", err)
	}
	o := &openTx{s: s, lock: &k, tx: tx, tctx: tctx, cancel: cancel, req: req, rec: rd.d.Record, prev: rd.cur,
		took: rd.d.Outcome == storekit.TookOver, connID: rd.connID}
	return rd.d.Result(), o, nil
}

// claimTxSQLite is ClaimTx on SQLite: the transaction begins (and takes
// the database's write lock, waiting for it), then the claim reads the key
// in it. An answer without a claim ends it.
func (s *Store) claimTxSQLite(ctx context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, storekit.OpenTx, error) {
	tctx, cancel := context.WithCancel(ctx)
	tx, err := s.begin(tctx)
	if err != nil {
		cancel()
		return storekit.ClaimResult{}, nil, err
	}
	var raw rawRecord
	var now int64
	var cur *storekit.Record
	err = tx.QueryRowContext(tctx, s.q.text[stGet], req.Key).Scan(append(raw.dest(), &now)...)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		err = tx.QueryRowContext(tctx, s.q.liteNow).Scan(&now)
	case err == nil:
		cur, err = raw.record(req.Key)
	}
	if err != nil {
		_ = tx.Rollback()
		cancel()
		return storekit.ClaimResult{}, nil, storeErr("claim", err)
	}
	d := storekit.DecideClaim(cur, req, now)
	if !d.Write {
		_ = tx.Rollback()
		cancel()
		return d.Result(), nil, nil
	}
	o := &openTx{s: s, tx: tx, tctx: tctx, cancel: cancel, req: req, rec: d.Record, prev: cur, took: d.Outcome == storekit.TookOver}
	return d.Result(), o, nil
}

// openTx is a one-commit claim: the transaction that runs fn and writes
// the record, begun on the connection that holds the key's lock (lock;
// nil on SQLite, whose transaction holds the database's).
type openTx struct {
	s      *Store
	lock   *keyLock
	tx     *sql.Tx
	tctx   context.Context // the transaction's
	cancel context.CancelFunc
	req    storekit.ClaimRequest
	rec    *storekit.Record // the claim as decided
	prev   *storekit.Record // the row it replaces, as read; nil when there was none
	took   bool             // the claim takes over a stale one
	connID int64            // MySQL: the session an unanswered COMMIT is killed by
	ended  bool
}

// Rollback implements storekit.OpenTx.
func (o *openTx) Rollback() {
	if o.ended {
		return
	}
	o.ended = true
	_ = o.tx.Rollback()
	o.cancel()
	if o.lock != nil {
		o.lock.letGo(true)
	}
}

// RunTx implements storekit.TxRunner: fn (body) runs in the open
// transaction, then the completion writes the record and the transaction
// commits (see storekit.TxRunner for what it returns).
func (o *openTx) RunTx(ctx context.Context, c storekit.TxClaim, body func(context.Context) (storekit.Completion, error)) error {
	s := o.s
	if s.db.Stats().MaxOpenConnections == 1 || s.dialect == SQLite {
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
	if beforeCommit != nil {
		beforeCommit()
	}
	err = s.commit(ctx, o.tctx, o.tx, o.connID, c.TakeoverAfter)
	o.cancel()
	if err == nil {
		switch {
		case o.lock == nil:
		case s.dialect == MySQL:
			// Let go of the lock after the caller has its answer: the
			// record is committed, and a claim read of the key meanwhile
			// finds it and does not try the lock.
			go o.lock.letGo(true)
		default:
			// PostgreSQL: the completion let go of the session's hold,
			// and the commit of the transaction's.
			o.lock.letGo(false)
		}
		return nil
	}
	if o.lock != nil {
		// The connection's state is unknown: it is closed, not pooled
		// (its session ends, and with it any lock it holds).
		o.lock.discard()
	}
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
// transaction (complete_claim_tx.sql; MySQL: claim_tx_insert.sql or
// claim_tx_update.sql; SQLite: the claim's upsert, under the database's
// write lock). A row that changed since the claim read it is
// storekit.ErrLostOwnership.
func (o *openTx) write(c storekit.Completion) error {
	msg, typ := failureColumns(c.Error)
	var result any
	if len(c.Result) > 0 {
		result = c.Result
	}
	r, q, s := o.rec, o.req, o.s
	if s.dialect == MySQL && s.maxPacket.Load() > 0 && result != nil &&
		s.checkPacket(o.tctx, len(c.Result)+len(q.Key)+len(q.Nonce)+statementSlack(c)) != nil {
		result = nil // as Do: completed without a result (replays: idem.ErrResultUnavailable)
	}
	var prev storekit.Record // zero: no row
	if o.prev != nil {
		prev = *o.prev
	}
	var tookAt int64
	if o.took {
		tookAt = r.StartedAt
	}
	ttl := c.TTL.Milliseconds()
	var (
		id   = stCompleteClaimTx
		args []any
	)
	switch {
	case s.dialect == SQLite:
		return o.writeSQLite(c, result, msg, typ, tookAt)
	case s.dialect == Postgres:
		args = []any{q.Tenant, q.Scope, q.Key, q.Nonce, q.PayloadHash, string(c.Status), result, msg, typ, ttl, r.Attempt,
			q.TakeoverAfter.Milliseconds(), q.Owner, prev.Nonce, prev.Attempt, prev.HeartbeatAt, prev.ExpiresAt, r.StartedAt, tookAt}
	case o.prev == nil:
		args = []any{q.Tenant, q.Scope, q.Key, q.Nonce, string(c.Status), r.Attempt, q.PayloadHash, result, msg, typ,
			r.StartedAt, ttl, tookAt, q.TakeoverAfter.Milliseconds(), q.Owner}
	default:
		id = stCompleteClaimTxUpdate
		args = []any{q.Tenant, q.Scope, q.Nonce, string(c.Status), r.Attempt, q.PayloadHash, result, msg, typ,
			r.StartedAt, ttl, tookAt, q.TakeoverAfter.Milliseconds(), q.Owner, q.Key, prev.Nonce, prev.Attempt, prev.HeartbeatAt, prev.ExpiresAt}
	}
	st, err := s.stmt(o.tctx, id)
	if err != nil {
		return storeErr("complete", err)
	}
	res, err := o.tx.StmtContext(o.tctx, st).ExecContext(o.tctx, args...)
	var n int64
	if err == nil {
		n, err = res.RowsAffected()
	}
	if n, _, ok := mysqlServerError(err); ok && n == 1062 { // duplicate key: a row was inserted since the claim read
		err = nil
	}
	if err != nil {
		return storeErr("complete", err)
	}
	if n == 0 {
		return fmt.Errorf("sqlstore: complete %s: the record changed since the claim: %w", q.Key, storekit.ErrLostOwnership)
	}
	return nil
}

// writeSQLite writes the claim's record with its completion c with the
// claim's upsert, in the transaction that holds the database's write lock
// since the claim read the key.
func (o *openTx) writeSQLite(c storekit.Completion, result, msg, typ any, tookAt int64) error {
	r, q := o.rec, o.req
	var now int64
	if err := o.tx.QueryRowContext(o.tctx, o.s.q.liteNow).Scan(&now); err != nil {
		return storeErr("complete", err)
	}
	_, err := o.tx.ExecContext(o.tctx, o.s.q.text[stClaim], q.Tenant, q.Scope, q.Key, q.Nonce, string(c.Status),
		r.Attempt, q.PayloadHash, result, msg, typ, r.StartedAt, now, now, now+c.TTL.Milliseconds(),
		tookAt, r.TakeoverMs, q.Owner)
	if err != nil {
		return storeErr("complete", err)
	}
	return nil
}
