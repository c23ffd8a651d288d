package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

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

// sqliteQueries returns the SQLite statements of table. Their
// parameters are numbered (?1 ...) in the order of PostgreSQL's, so the
// store passes them the same arguments.
func sqliteQueries(table string) queries {
	t, idx := quote(SQLite, table)
	on := t
	if i := strings.LastIndexByte(table, '.'); i >= 0 {
		// SQLite names an index's schema on the index, not its table.
		on, _ = quote(SQLite, table[i+1:])
		schema, _ := quote(SQLite, table[:i])
		idx = schema + "." + idx
	}
	r := strings.NewReplacer("{{table}}", t, "{{index}}", idx, "{{on}}", on, "{{cols}}", cols, "{{now}}", liteNow)
	q := commonQueries(SQLite, r)
	q.liteLock = sqlFile(SQLite, "lock", r)
	q.liteNow = sqlFile(SQLite, "now", r)
	q.text[stClaim] = sqlFile(SQLite, "claim", r)
	q.text[stCompleteTx] = q.text[stComplete]
	q.litePurge = sqlFile(SQLite, "purge", r)
	return q
}

// claimSQLite is the SQLite claim: one transaction that takes the write
// lock, reads the row and the database's clock, decides with
// storekit.DecideClaim and writes the decision. Writers are serialized,
// so what it read is what it writes over. SQLite has no sessions to tell
// a dead owner by: a claim is taken over after the takeover threshold, or
// at once when it was left by an earlier incarnation of the claiming
// process's instance (DecideClaim's rule, on the recorded owner).
func (s *Store) claimSQLite(ctx context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, error) {
	var res storekit.ClaimResult
	err := retryTransient(ctx, func() error {
		var err error
		res, err = s.claimSQLiteOnce(ctx, req)
		return err
	})
	if err != nil {
		var ce *storekit.CorruptRecordError
		if errors.As(err, &ce) {
			return storekit.ClaimResult{}, err
		}
		return storekit.ClaimResult{}, storeErr("claim", err)
	}
	return res, nil
}

func (s *Store) claimSQLiteOnce(ctx context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return storekit.ClaimResult{}, err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, s.q.liteLock); err != nil {
		return storekit.ClaimResult{}, err
	}
	var raw rawRecord
	var now int64
	var cur *storekit.Record
	err = tx.QueryRowContext(ctx, s.q.text[stGet], req.Key).Scan(append(raw.dest(), &now)...)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		if err := tx.QueryRowContext(ctx, s.q.liteNow).Scan(&now); err != nil {
			return storekit.ClaimResult{}, err
		}
	case err != nil:
		return storekit.ClaimResult{}, err
	default:
		if cur, err = raw.record(req.Key); err != nil {
			return storekit.ClaimResult{}, err
		}
	}
	d := storekit.DecideClaim(cur, req, now)
	if !d.Write {
		return d.Result(), tx.Commit()
	}
	r := d.Record
	msg, typ := failureColumns(r.Error)
	var result any
	if len(r.Result) > 0 {
		result = r.Result
	}
	var takenOver int64
	if d.Outcome == storekit.TookOver {
		takenOver = now
	}
	if _, err := tx.ExecContext(ctx, s.q.text[stClaim], req.Tenant, req.Scope, req.Key, r.Nonce, string(r.Status),
		r.Attempt, r.PayloadHash, result, msg, typ, r.StartedAt, r.HeartbeatAt, r.CompletedAt, r.ExpiresAt,
		takenOver, r.TakeoverMs, r.Owner); err != nil {
		return storekit.ClaimResult{}, err
	}
	if err := tx.Commit(); err != nil {
		return storekit.ClaimResult{}, err
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

// sqliteNoSchema reports SQLite's "unknown database", the error of a
// table whose schema names no attached database.
func sqliteNoSchema(err error) bool {
	return strings.Contains(err.Error(), "unknown database")
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
	// A new connection runs the DSN's pragmas as it opens; like a schema
	// change, journal_mode can meet SQLITE_BUSY at once, without the
	// busy handler, while another connection changes the schema.
	var conn *sql.Conn
	err := retryTransient(ctx, func() error {
		var err error
		conn, err = s.db.Conn(ctx)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlstore: migrate %s: %w", s.cfg.table, err)
	}
	defer conn.Close()
	var busy int64
	if err := conn.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy); err != nil {
		return fmt.Errorf("sqlstore: migrate %s: read busy_timeout: %w", s.cfg.table, err)
	}
	if busy <= 0 {
		return &storekit.OptionError{Option: "sqlstore.SQLite", Reason: "the connection's busy_timeout is 0: open the database " +
			"with a busy timeout on every connection (modernc.org/sqlite: " + SQLiteDSNParams + ")"}
	}
	var mode string
	if err := retryTransient(ctx, func() error {
		return conn.QueryRowContext(ctx, `PRAGMA journal_mode = WAL`).Scan(&mode)
	}); err != nil {
		return fmt.Errorf("sqlstore: migrate %s: journal_mode WAL: %w", s.cfg.table, err)
	}
	if mode != "wal" && mode != "memory" { // an in-memory database has no journal file
		return &storekit.OptionError{Option: "sqlstore.SQLite", Reason: "journal_mode is " + mode + ", not wal"}
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
