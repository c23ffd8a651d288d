package sqlstore

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem/storekit"
)

// DefaultCleanup is about how often an open store removes the rows expired
// past retention by itself (each wait is drawn from [15s, 45s)).
const DefaultCleanup = 30 * time.Second

// defaultPurgePause is how many times as long as a batch took Purge and
// the clean-up rest after it (see purger.pacer).
const defaultPurgePause = 1.0

// postgresPurgeBatch is the rows a PostgreSQL batch removes: a smaller
// commit than storekit.DefaultPurgeBatch's, whose WAL flush the claims
// beside it wait behind less. 1M expired rows, a probe of fresh claims and
// replays beside the removal, on a quiet 2-core machine, resting as long
// as each batch took: batches of 500, the probe's p99 2.21-3.29x of an
// equal window without removal (three runs, 14-15 s); batches of 100,
// 1.28-1.96x (four runs, 33-36 s).
const postgresPurgeBatch = 100

// WithCleanup makes the store remove the rows expired past retention by
// itself about every d (each wait drawn from [d/2, 3d/2)) until Close; the
// default is DefaultCleanup. Of the processes sharing a table, one cleans
// at a time. d must be at least a millisecond; a huge d means rarely. It overrides an earlier WithoutCleanup.
func WithCleanup(every time.Duration) Option {
	return func(c *config) { c.SetCleanup(every) }
}

// WithoutCleanup runs no clean-up of the store's own: expired rows stay
// until Purge is called, for users who run Purge from a job of their own
// (or the idem CLI's purge). It overrides an earlier WithCleanup.
func WithoutCleanup() Option {
	return func(c *config) { c.SetNoCleanup() }
}

// WithLogger sets where a failed clean-up pass is logged (at Warn, with
// the error); the default is slog.Default(). A nil logger is an invalid
// option.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.Invalid("WithLogger", "logger is nil")
			return
		}
		c.logger = l
	}
}

// purger removes expired rows of one table in batches. It is what the
// clean-up goroutine holds (not the Store, so that a Store dropped without
// Close can be collected and its clean-up stopped).
type purger struct {
	db        *sql.DB
	dialect   Dialect
	retention int64 // ms
	batchSize int
	pause     float64 // rest per unit of work between batches (see pacer)
	lockName  string  // the table's name: the clean-up's try-lock is derived from it

	// PostgreSQL: one statement removes a batch; $1 retention ms, $2 the
	// batch size; the locking variant's $3 is lockName.
	pgBatch, pgBatchLocked string
	// MySQL: a plain read of a batch's keys (retention ms, batch size),
	// and the DELETE by those keys is built per batch (mysqlDelete).
	myKeys, myDeleteHead, myDeleteTail string
	myLock, myUnlock                   string
	// SQLite: one DELETE ... RETURNING per batch (sqlite.go).
	litePurge string

	passes atomic.Int64 // clean-up passes finished (tests read it)
	ran    atomic.Int64 // of which passes that held the try-lock at least once
}

func newPurger(db *sql.DB, d Dialect, table string, retention time.Duration) *purger {
	p := &purger{db: db, dialect: d, retention: retention.Milliseconds(), batchSize: storekit.DefaultPurgeBatch, pause: defaultPurgePause, lockName: table}
	if d == Postgres {
		p.batchSize = postgresPurgeBatch
	}
	t, _ := quote(d, table)
	switch d {
	case Postgres:
		// The batch's rows are picked on the expires_at index (oldest
		// first, so a pass with nothing expired reads no live row) and
		// locked; rows a claim or a write holds are skipped, not waited
		// for. The DELETE judges every row again, its newest version
		// (EvalPlanQual), against the same cut-off, read from the
		// server's clock at the statement's start: a row a claim revived
		// since the statement's snapshot stays. The DELETE finds the rows
		// by their primary key (an array, so the planner does not join
		// with a scan of the whole expired range, which made each batch
		// cost as much as the backlog; expires_at + 0 keeps it off that
		// index).
		//
		// $3 is where the previous batch of the pass ended: the index
		// entries of the rows it deleted stay until vacuum, and a scan
		// from the start would step over all of them in every batch.
		//
		// The batch commits without waiting for its WAL to reach the disk
		// (synchronous_commit off for its transaction alone): a delete
		// lost in a crash leaves rows a later batch deletes again, and a
		// claim's commit, which waits, flushes the WAL written before it.
		cut := `WITH c AS MATERIALIZED (SELECT ` + pgNow + ` - $1 AS before, ` +
			`set_config('synchronous_commit', 'off', true) AS async)`
		del := func(gate string) string {
			return `DELETE FROM ` + t + ` WHERE key_hash = ANY (ARRAY(SELECT key_hash FROM ` + t +
				` WHERE expires_at >= $3 AND expires_at < (SELECT before FROM c) ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED))` +
				` AND expires_at + 0 < (SELECT before FROM c)` + gate + ` RETURNING expires_at`
		}
		p.pgBatch = cut + `, d AS (` + del("") + `) SELECT true, count(*), coalesce(max(expires_at), $3) FROM d`
		// The clean-up's batch first tries the table's transaction-level
		// advisory lock; without it the batch deletes nothing (a one-time
		// filter) and says so.
		p.pgBatchLocked = cut + `, l AS MATERIALIZED (SELECT pg_try_advisory_xact_lock(hashtextextended('idem-purge:' || $4, 0)) AS ok), ` +
			`d AS (` + del(` AND (SELECT ok FROM l)`) + `) SELECT (SELECT ok FROM l), count(*), coalesce(max(expires_at), $3) FROM d`
	case MySQL:
		// A plain SELECT is a consistent read: it takes no lock, so
		// nothing it reads (the expires_at index, covering: the key is in
		// it) blocks an insert. The DELETE finds each row by its primary
		// key (a record lock on that row alone, READ COMMITTED so a key
		// gone since takes no gap lock) and judges it again, its newest
		// version, by the server's clock: a row a claim revived since the
		// SELECT stays.
		// The read starts where the previous batch of the pass ended: the
		// index entries of the rows it deleted stay (delete-marked) until
		// InnoDB's purge removes them, and a read from the start would
		// step over all of them in every batch.
		p.myKeys = `SELECT key_hash, expires_at FROM ` + t + ` WHERE expires_at >= ? AND expires_at < ` + mysqlNow + ` - ? ORDER BY expires_at LIMIT ?`
		p.myDeleteHead = `DELETE FROM ` + t + ` WHERE key_hash IN (`
		// expires_at + 0: the optimizer must not pick the expires_at
		// index for the DELETE (it does when it estimates few rows), whose
		// range scan would lock the index's gaps, where new claims insert.
		p.myDeleteTail = `) AND expires_at + 0 < ` + mysqlNow + ` - ?`
		// GET_LOCK names are server-wide: the database's name keeps two
		// databases' tables of one name apart, and the hash keeps the name
		// within 64 characters.
		name := `CONCAT('idem-purge:', LEFT(SHA2(CONCAT(IFNULL(DATABASE(), ''), '/', ?), 256), 40))`
		p.myLock = `SELECT GET_LOCK(` + name + `, 0)`
		p.myUnlock = `SELECT RELEASE_LOCK(` + name + `)`
	case SQLite:
		p.litePurge = sqliteQueries(table).litePurge
	}
	return p
}

// purge removes every row expired past retention, in batches, and returns
// how many it removed.
func (p *purger) purge(ctx context.Context) (int, error) {
	removed := 0
	from := int64(math.MinInt64)
	pace := p.pacer(ctx)
	_, err := storekit.PurgeBatches(ctx, p.batchSize, func(ctx context.Context, limit int) (int, error) {
		n, read, _, err := p.batch(ctx, limit, false, &from)
		removed += n
		if err == nil {
			err = pace.Rest(ctx)
		}
		return read, err
	})
	return removed, err
}

// pass is one clean-up pass: batches while this process holds the table's
// try-lock, ending as soon as another process holds it (that one is
// cleaning) or a batch removes less than a full batch.
func (p *purger) pass(ctx context.Context) error {
	held := false
	from := int64(math.MinInt64)
	pace := p.pacer(ctx)
	_, err := storekit.PurgeBatches(ctx, p.batchSize, func(ctx context.Context, limit int) (int, error) {
		_, read, got, err := p.batch(ctx, limit, true, &from)
		if err != nil || !got {
			return 0, err
		}
		held = true
		return read, pace.Rest(ctx)
	})
	if held {
		p.ran.Add(1)
	}
	p.passes.Add(1)
	return err
}

// pacer returns the pacing of one Purge or pass: after each batch it rests
// p.pause times as long as the batch took, so the claims beside it have
// the server (its CPU, its WAL's flushes) most of the time. PostgreSQL,
// 1M expired rows, a probe of fresh claims and replays beside the
// removal, its p99 against an equal window without removal, on a quiet
// 2-core machine, batches of 500, three alternating runs each: back to
// back, 2.18-4.19x (removal 7-10 s); resting as long as each batch took,
// 2.21-3.29x (14-15 s). See postgresPurgeBatch for the batch size.
func (p *purger) pacer(ctx context.Context) *storekit.Pacer {
	pace := &storekit.Pacer{Ratio: p.pause}
	_ = pace.Rest(ctx) // starts the count
	return pace
}

// batch removes at most limit rows expired past retention: n removed, of
// read picked for removal (a batch with read < limit was the last). With
// lock, it first takes the table's clean-up try-lock and removes nothing
// when another session holds it (got false); the lock is released with
// the batch, so the connection goes back to the pool between batches.
// The batch looks at rows whose expires_at is at least *from, and moves
// *from to the greatest expires_at it removed.
func (p *purger) batch(ctx context.Context, limit int, lock bool, from *int64) (n, read int, got bool, err error) {
	switch p.dialect {
	case Postgres:
		var count, last int64
		err = retryTransient(ctx, func() error {
			var row *sql.Row
			if lock {
				row = p.db.QueryRowContext(ctx, p.pgBatchLocked, p.retention, limit, *from, p.lockName)
			} else {
				row = p.db.QueryRowContext(ctx, p.pgBatch, p.retention, limit, *from)
			}
			return row.Scan(&got, &count, &last)
		})
		if err != nil {
			return 0, 0, false, storeErr("purge", err)
		}
		*from = last
		return int(count), int(count), got, nil
	case MySQL:
		return p.mysqlBatch(ctx, limit, lock, from)
	case SQLite:
		return p.sqliteBatch(ctx, limit, from)
	}
	return 0, 0, false, fmt.Errorf("sqlstore: purge: unknown dialect %v", p.dialect)
}

func (p *purger) mysqlBatch(ctx context.Context, limit int, lock bool, from *int64) (n, read int, got bool, err error) {
	conn, err := p.db.Conn(ctx)
	if err != nil {
		return 0, 0, false, storeErr("purge", err)
	}
	defer conn.Close()
	if lock {
		var ok sql.NullInt64
		if err := conn.QueryRowContext(ctx, p.myLock, p.lockName).Scan(&ok); err != nil {
			return 0, 0, false, storeErr("purge", err)
		}
		if ok.Int64 != 1 {
			return 0, 0, false, nil
		}
		defer func() {
			// A new context: the lock must go even when ctx ended. A
			// connection that cannot say it released it is discarded,
			// which releases it, rather than going back to the pool
			// holding it.
			rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var rel sql.NullInt64
			if err := conn.QueryRowContext(rctx, p.myUnlock, p.lockName).Scan(&rel); err != nil || rel.Int64 != 1 {
				_ = conn.Raw(func(any) error { return driver.ErrBadConn })
			}
		}()
	}
	keys, last, err := p.mysqlKeys(ctx, conn, limit, *from)
	if err != nil {
		return 0, 0, true, storeErr("purge", err)
	}
	if len(keys) == 0 {
		return 0, 0, true, nil
	}
	args := make([]any, 0, len(keys)+1)
	for _, k := range keys {
		args = append(args, k)
	}
	args = append(args, p.retention)
	q := p.myDeleteHead + strings.TrimSuffix(strings.Repeat("?, ", len(keys)), ", ") + p.myDeleteTail
	var deleted int64
	err = retryTransient(ctx, func() error {
		tx, err := conn.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
		if err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, q, args...)
		if err == nil {
			deleted, err = res.RowsAffected()
		}
		if err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	})
	if err != nil {
		return 0, len(keys), true, storeErr("purge", err)
	}
	// A batch whose read found limit keys is full even if some were
	// revived or removed by another process since: the next one reads
	// again.
	*from = last
	return int(deleted), len(keys), true, nil
}

// mysqlKeys reads the keys of at most limit rows expired past retention
// whose expires_at is at least from, oldest first, and the last one's
// expires_at.
func (p *purger) mysqlKeys(ctx context.Context, conn *sql.Conn, limit int, from int64) (keys []string, last int64, err error) {
	err = retryTransient(ctx, func() error {
		keys = keys[:0]
		rows, err := conn.QueryContext(ctx, p.myKeys, from, p.retention, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var k string
			if err := rows.Scan(&k, &last); err != nil {
				return err
			}
			keys = append(keys, k)
		}
		return rows.Err()
	})
	return keys, last, err
}
