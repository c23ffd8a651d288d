package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/storekit"
)

// SQLite: the statements, the claim and the purge batch of the SQLite
// dialect.
//
// SQLite runs one writer at a time per database file; readers go on
// beside it in WAL mode. Every write of the store is one statement in
// autocommit, or a transaction whose first statement is a write (liteLock),
// so it holds the write lock from its start: nothing it read can be
// changed by another writer before it writes (no SQLITE_BUSY_SNAPSHOT), and
// a writer that finds the lock taken waits for it up to the connection's
// busy_timeout, which Migrate checks is set.
//
// The clock is the database's, read by the statement: unixepoch('subsec')
// (SQLite 3.42+) in milliseconds. SQLite reads 'now' once per step of a
// statement, so one statement writes one time in every column.
const liteNow = `CAST(round(unixepoch('subsec') * 1000) AS INTEGER)`

// sqliteQueries fills q with the SQLite statements of table t (quoted).
// Their parameters are numbered (?1 ...) in the order of PostgreSQL's, so
// the store passes them the same arguments.
func sqliteQueries(q *queries, table string) {
	t, idx := quote(SQLite, table)
	on := t
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		// SQLite names an index's schema on the index, not its table.
		on, _ = quote(SQLite, table[i+1:])
		schema, _ := quote(SQLite, table[:i])
		idx = schema + "." + idx
	}
	q.create = []string{
		`CREATE TABLE IF NOT EXISTS ` + t + ` (
  tenant         TEXT    NOT NULL DEFAULT '',
  scope          TEXT    NOT NULL DEFAULT '',
  key_hash       TEXT    NOT NULL PRIMARY KEY,
  record_version INTEGER NOT NULL DEFAULT 1,
  claim_nonce    TEXT    NOT NULL,
  status         TEXT    NOT NULL,
  attempt_count  INTEGER NOT NULL DEFAULT 1,
  payload_hash   TEXT    NOT NULL DEFAULT '',
  result         BLOB,
  error_message  TEXT,
  error_type     TEXT,
  started_at     INTEGER NOT NULL,
  heartbeat_at   INTEGER NOT NULL,
  completed_at   INTEGER NOT NULL DEFAULT 0,
  expires_at     INTEGER NOT NULL,
  taken_over_at  INTEGER NOT NULL DEFAULT 0,
  takeover_ms    INTEGER NOT NULL DEFAULT 0
)`,
		`CREATE INDEX IF NOT EXISTS ` + idx + ` ON ` + on + ` (expires_at)`,
	}
	where := `key_hash = ?1`
	// A write that changes nothing: the first statement of the store's
	// transactions, which takes the database's write lock (waiting for it
	// up to busy_timeout) before anything is read.
	q.liteLock = `UPDATE ` + t + ` SET tenant = tenant WHERE 0`
	q.liteNow = `SELECT ` + liteNow
	// The claim's write, inside its transaction, of the record
	// storekit.DecideClaim made: tenant, scope, key, nonce, status,
	// attempt, payload hash, result, error message, error type,
	// started_at, heartbeat_at, completed_at, expires_at, taken_over_at,
	// takeover_ms.
	q.text[stClaim] = `INSERT INTO ` + t + ` (tenant, scope, key_hash, record_version, claim_nonce, status, attempt_count, ` +
		`payload_hash, result, error_message, error_type, started_at, heartbeat_at, completed_at, expires_at, taken_over_at, takeover_ms) ` +
		`VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16) ` +
		`ON CONFLICT (key_hash) DO UPDATE SET tenant = excluded.tenant, scope = excluded.scope, record_version = 1, ` +
		`claim_nonce = excluded.claim_nonce, status = excluded.status, attempt_count = excluded.attempt_count, ` +
		`payload_hash = excluded.payload_hash, result = excluded.result, error_message = excluded.error_message, ` +
		`error_type = excluded.error_type, started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at, ` +
		`completed_at = excluded.completed_at, expires_at = excluded.expires_at, taken_over_at = excluded.taken_over_at, ` +
		`takeover_ms = excluded.takeover_ms`
	q.text[stGet] = `SELECT ` + cols + `, ` + liteNow + ` FROM ` + t + ` WHERE ` + where
	// $1 key, $2 nonce, $3 lease ms
	q.text[stHeartbeat] = `UPDATE ` + t + ` SET heartbeat_at = ` + liteNow + `, expires_at = max(expires_at, ` + liteNow + ` + ?3) ` +
		`WHERE ` + where + ` AND claim_nonce = ?2 AND status = 'in_progress' AND expires_at > ` + liteNow
	// $1 key, $2 nonce, $3 status, $4 result, $5 error message, $6 error
	// type, $7 ttl ms
	q.text[stComplete] = `UPDATE ` + t + ` SET status = ?3, result = ?4, error_message = ?5, error_type = ?6, ` +
		`completed_at = ` + liteNow + `, heartbeat_at = ` + liteNow + `, expires_at = ` + liteNow + ` + ?7 ` +
		`WHERE ` + where + ` AND claim_nonce = ?2`
	q.text[stCompleteTx] = q.text[stComplete]
	// $1 key, $2 nonce. min: a release never moves an expiry forward.
	q.text[stRelease] = `UPDATE ` + t + ` SET expires_at = min(expires_at, ` + liteNow + `) WHERE ` + where +
		` AND claim_nonce = ?2 AND status = 'in_progress'`
	q.text[stDelete] = `DELETE FROM ` + t + ` WHERE ` + where
	// The transaction that wrote the record is over when its commit
	// returns, whatever it returned: a plain read tells which way it went.
	q.readBack = `SELECT claim_nonce, status FROM ` + t + ` WHERE ` + where
	// Purge: one statement per batch, under the write lock: the rows
	// expired past retention ($2 ms) by the database's clock, oldest first,
	// from $1 on, at most $3.
	q.litePurge = `DELETE FROM ` + t + ` WHERE key_hash IN (SELECT key_hash FROM ` + t +
		` WHERE expires_at >= ?1 AND expires_at < ` + liteNow + ` - ?2 ORDER BY expires_at LIMIT ?3) RETURNING expires_at`
}

// claimSQLite is the SQLite claim: one transaction that takes the write
// lock, reads the row and the database's clock, decides with
// storekit.DecideClaim and writes the decision. Writers are serialized,
// so what it read is what it writes over.
func (s *Store) claimSQLite(ctx context.Context, req idem.ClaimRequest) (idem.ClaimResult, error) {
	var res idem.ClaimResult
	err := retryTransient(ctx, func() error {
		var err error
		res, err = s.claimSQLiteOnce(ctx, req)
		return err
	})
	if err != nil {
		var ce *idem.CorruptRecordError
		if errors.As(err, &ce) {
			return idem.ClaimResult{}, err
		}
		return idem.ClaimResult{}, storeErr("claim", err)
	}
	return res, nil
}

func (s *Store) claimSQLiteOnce(ctx context.Context, req idem.ClaimRequest) (idem.ClaimResult, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return idem.ClaimResult{}, err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, s.q.liteLock); err != nil {
		return idem.ClaimResult{}, err
	}
	var raw rawRecord
	var now int64
	var cur *idem.Record
	err = tx.QueryRowContext(ctx, s.q.text[stGet], req.Key).Scan(append(raw.dest(), &now)...)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if err := tx.QueryRowContext(ctx, s.q.liteNow).Scan(&now); err != nil {
			return idem.ClaimResult{}, err
		}
	case err != nil:
		return idem.ClaimResult{}, err
	default:
		if cur, err = raw.record(req.Key); err != nil {
			return idem.ClaimResult{}, err
		}
	}
	d := storekit.DecideClaim(cur, req, now)
	if !d.Write {
		return d.Result(), tx.Commit()
	}
	r := d.Record
	var msg, typ any
	if r.Error != nil {
		msg, typ = r.Error.Message, r.Error.Type
	}
	var result any
	if len(r.Result) > 0 {
		result = r.Result
	}
	var takenOver int64
	if d.Outcome == idem.TookOver {
		takenOver = now
	}
	if _, err := tx.ExecContext(ctx, s.q.text[stClaim], req.Tenant, req.Scope, req.Key, r.Nonce, string(r.Status),
		r.Attempt, r.PayloadHash, result, msg, typ, r.StartedAt, r.HeartbeatAt, r.CompletedAt, r.ExpiresAt,
		takenOver, r.TakeoverMs); err != nil {
		return idem.ClaimResult{}, err
	}
	if err := tx.Commit(); err != nil {
		return idem.ClaimResult{}, err
	}
	return d.Result(), nil
}

// sqliteBatch is one purge batch on SQLite: one DELETE, which holds the
// database's write lock for its batch only. Writers are serialized, so a
// clean-up pass needs no lock of its own: another process's pass finds
// the rows already gone.
func (p *purger) sqliteBatch(ctx context.Context, limit int, from *int64) (n, read int, got bool, err error) {
	var last int64
	err = retryTransient(ctx, func() error {
		n, last = 0, *from
		rows, err := p.db.QueryContext(ctx, p.litePurge, *from, p.retention, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var e int64
			if err := rows.Scan(&e); err != nil {
				return err
			}
			n++
			last = max(last, e)
		}
		return rows.Err()
	})
	if err != nil {
		return 0, 0, true, storeErr("purge", err)
	}
	*from = last
	return n, n, true, nil
}

// sqliteBusy reports SQLite's SQLITE_BUSY or SQLITE_LOCKED (the write lock
// still taken when busy_timeout ran out): nothing was written, and the
// statement can be sent again. Drivers report the result code by a Code
// method (modernc.org/sqlite) or in the message.
func sqliteBusy(err error) bool {
	var ce interface{ Code() int }
	if errors.As(err, &ce) {
		c := ce.Code() & 0xff
		return c == 5 || c == 6
	}
	msg := err.Error()
	return strings.Contains(msg, "SQLITE_BUSY") || strings.Contains(msg, "database is locked")
}

// sqliteNoTable reports SQLite's "no such table".
func sqliteNoTable(err error) bool {
	return strings.Contains(err.Error(), "no such table")
}

// migrateSQLite checks the connection's busy_timeout (a pool whose
// connections do not wait for the write lock fails its writes as soon as
// two processes, or two goroutines, write at once) and puts the database
// file in WAL mode, which the file keeps.
func (s *Store) migrateSQLite(ctx context.Context) error {
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return fmt.Errorf("sqlstore: migrate %s: %w", s.cfg.table, err)
	}
	defer conn.Close()
	var busy int64
	if err := conn.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy); err != nil {
		return fmt.Errorf("sqlstore: migrate %s: read busy_timeout: %w", s.cfg.table, err)
	}
	if busy <= 0 {
		return &idem.OptionError{Option: "sqlstore.SQLite", Reason: "the connection's busy_timeout is 0: open the database " +
			"with a busy timeout on every connection (modernc.org/sqlite: " + SQLiteDSNParams + ")"}
	}
	var mode string
	if err := retryTransient(ctx, func() error {
		return conn.QueryRowContext(ctx, `PRAGMA journal_mode = WAL`).Scan(&mode)
	}); err != nil {
		return fmt.Errorf("sqlstore: migrate %s: journal_mode WAL: %w", s.cfg.table, err)
	}
	if mode != "wal" && mode != "memory" { // an in-memory database has no journal file
		return &idem.OptionError{Option: "sqlstore.SQLite", Reason: "journal_mode is " + mode + ", not wal"}
	}
	return nil
}

// SQLiteDSNParams are the parameters of a modernc.org/sqlite DSN that the
// SQLite dialect wants on every connection: a busy timeout of 5 s (a writer
// waits for another's write lock instead of failing), WAL (readers go on
// beside the writer), and transactions that take the write lock when they
// begin. Append them to the file's name:
//
//	sql.Open("sqlite", "file:/var/lib/app/idem.db?"+sqlstore.SQLiteDSNParams)
const SQLiteDSNParams = "_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate"
