package sqlstore_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/go-sql-driver/mysql"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/stores/sqlstore"
)

// hooks is a database/sql driver wrapper that runs a function once, right
// after the first execution of a statement whose text matches, before the
// result goes back to the store: what another client does between two of
// the store's statements.
type hooks struct {
	mu    sync.Mutex
	match func(query string) bool
	run   func()
}

// arm makes the next execution of a statement matching match run f.
func (h *hooks) arm(match func(string) bool, f func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.match, h.run = match, f
}

func (h *hooks) after(query string) {
	h.mu.Lock()
	var f func()
	if h.match != nil && h.match(query) {
		f, h.match, h.run = h.run, nil, nil
	}
	h.mu.Unlock()
	if f != nil {
		f()
	}
}

type hookConnector struct {
	driver.Connector
	h *hooks
}

func (c hookConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &hookConn{Conn: conn, h: c.h}, nil
}

type hookConn struct {
	driver.Conn
	h *hooks
}

func (c *hookConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	st, err := c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &hookStmt{Stmt: st, query: query, h: c.h}, nil
}

func (c *hookConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c *hookConn) CheckNamedValue(v *driver.NamedValue) error {
	if nc, ok := c.Conn.(driver.NamedValueChecker); ok {
		return nc.CheckNamedValue(v)
	}
	return driver.ErrSkip
}

func (c *hookConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

type hookStmt struct {
	driver.Stmt
	query string
	h     *hooks
}

func (s *hookStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	res, err := s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
	s.h.after(s.query)
	return res, err
}

func (s *hookStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	rows, err := s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
	s.h.after(s.query)
	return rows, err
}

// newHookedMySQLEnv returns a MySQL store on a fresh table over a pool of
// its own whose statements run h's hook.
func newHookedMySQLEnv(t *testing.T, h *hooks) *env {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn(t, sqlstore.MySQL))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(hookConnector{Connector: conn, h: h})
	t.Cleanup(func() { _ = db.Close() })
	return newEnvOn(t, sqlstore.MySQL, db, nil)
}

// MySQL: a Release or Complete whose UPDATE changed no row (the nonce is
// another's) must report storekit.ErrLostOwnership, even when a claim with the
// caller's nonce lands right after that UPDATE (a retried claim of the same
// nonce). Before, a zero was checked with a second statement, a SELECT,
// which saw the new claim's nonce and reported a write that never happened.
func TestOwnedAnswerIsTheUpdates(t *testing.T) {
	for _, op := range []string{"release", "complete"} {
		t.Run(op, func(t *testing.T) {
			h := &hooks{}
			e := newHookedMySQLEnv(t, h)
			other, err := sqlstore.New(sharedDB(t, sqlstore.MySQL), sqlstore.MySQL, sqlstore.WithTable(e.table))
			require.NoError(t, err)
			ctx, key := ctxT(t), storageKey()
			first := claimReq(key)
			_, err = e.store.Claim(ctx, first)
			require.NoError(t, err)
			age(t, e, key, 2*takeoverAfter) // stale: a claim may take it over

			mine := claimReq(key) // the nonce Release/Complete is called with
			var claimed storekit.ClaimResult
			var claimErr error
			h.arm(func(q string) bool {
				return strings.HasPrefix(q, "UPDATE") && strings.Contains(q, "claim_nonce = ?") &&
					!strings.Contains(q, "heartbeat_at = ?") // not the claim's compare-and-swap
			}, func() { claimed, claimErr = other.Claim(ctx, mine) })

			if op == "release" {
				err = e.store.Release(ctx, key, mine.Nonce)
			} else {
				err = e.store.Complete(ctx, key, mine.Nonce,
					storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("r"), TTL: time.Minute})
			}
			require.NoError(t, claimErr)
			require.Equal(t, storekit.TookOver, claimed.Outcome, "the hook's claim took the stale record over")
			assert.ErrorIs(t, err, storekit.ErrLostOwnership,
				"the UPDATE changed nothing: the %s did not happen, whatever the row holds afterwards", op)
			rec, gerr := e.store.Get(ctx, key)
			require.NoError(t, gerr)
			assert.Equal(t, storekit.StatusInProgress, rec.Status, "the takeover's claim is untouched")
			assert.Equal(t, mine.Nonce, rec.Nonce)
		})
	}
}

// waitLockWait waits until a statement on table is waiting for a row lock;
// the test fails if done delivers first (the statement did not wait).
func waitLockWait(t *testing.T, d sqlstore.Dialect, table string, done <-chan error) {
	t.Helper()
	q := `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%' || $1 || '%'`
	poll := 2 * time.Millisecond
	if d == sqlstore.MySQL {
		q = `SELECT count(*) FROM information_schema.INNODB_TRX WHERE trx_state = 'LOCK WAIT' AND trx_query LIKE CONCAT('%', ?, '%')`
		// MariaDB refreshes INNODB_TRX only when it was last read over
		// 100ms ago: polled faster, it never changes.
		poll = 150 * time.Millisecond
	}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		var n int
		require.NoError(t, sharedDB(t, d).QueryRow(q, table).Scan(&n))
		if n > 0 {
			return
		}
		select {
		case err := <-done:
			t.Fatalf("the statement returned (%v) without waiting for the row lock", err)
		case <-time.After(poll):
		}
	}
	t.Fatal("no statement came to wait for the row lock")
}

// nowSQL is the dialect's server clock in Unix milliseconds, as the
// store's statements read it.
func nowSQL(d sqlstore.Dialect) string {
	if d == sqlstore.MySQL {
		return `(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)`
	}
	return `floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`
}

func ph(d sqlstore.Dialect, q string) string {
	if d == sqlstore.Postgres {
		return strings.ReplaceAll(q, "?", "$1")
	}
	return q
}

// releaseBehindLock holds key's row lock in a transaction while op starts
// and comes to wait for the lock, then releases the record in that
// transaction (expires_at = the server's now, as Release writes it) and
// commits: op's statement goes on after the release. It returns op's
// error.
func releaseBehindLock(t *testing.T, e *env, key string, op func() error) error {
	t.Helper()
	ctx := ctxT(t)
	tx, err := sharedDB(t, e.dialect).BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.ExecContext(ctx, ph(e.dialect, "SELECT key_hash FROM "+e.table+" WHERE key_hash = ? FOR UPDATE"), key)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- op() }()
	waitLockWait(t, e.dialect, e.table, done)
	time.Sleep(5 * time.Millisecond) // the release's clock is past the waiting statement's start
	res, err := tx.ExecContext(ctx, ph(e.dialect, "UPDATE "+e.table+" SET expires_at = "+nowSQL(e.dialect)+" WHERE key_hash = ?"), key)
	require.NoError(t, err)
	n, _ := res.RowsAffected()
	require.EqualValues(t, 1, n)
	require.NoError(t, tx.Commit())
	return <-done
}

// A heartbeat that waited for the row lock behind its owner's Release must
// find the record released: the statement judges the row by the server's
// clock read after the lock is held. Before, both dialects read "now" when
// the statement started, judged the released record (expires_at = the
// release's now, later than that) live and revived it for a whole lease.
func TestHeartbeatBehindRelease(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		e := newEnv(t, d)
		ctx, key := ctxT(t), storageKey()
		r := claimReq(key)
		_, err := e.store.Claim(ctx, r)
		require.NoError(t, err)
		err = releaseBehindLock(t, e, key, func() error {
			c, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			return e.store.Heartbeat(c, key, r.Nonce, leaseTTL)
		})
		assert.ErrorIs(t, err, storekit.ErrLostOwnership, "the heartbeat came after the release")
		_, err = e.store.Get(ctx, key)
		assert.ErrorIs(t, err, storekit.ErrNotFound, "the released record stays released")
	})
}

// PostgreSQL: a claim whose upsert waited for the row lock behind the
// owner's Release of a stale claim re-claims the released record: the
// answer is Claimed, not TookOver. Before, the upsert judged the row with
// the time the statement started (EXCLUDED.started_at), earlier than the
// release, so it saw a stale live claim and took it over.
func TestClaimBehindRelease(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		e := newEnv(t, d)
		ctx, key := ctxT(t), storageKey()
		_, err := e.store.Claim(ctx, claimReq(key))
		require.NoError(t, err)
		age(t, e, key, 2*takeoverAfter) // stale, not expired
		var res storekit.ClaimResult
		err = releaseBehindLock(t, e, key, func() error {
			var err error
			res, err = e.store.Claim(ctx, claimReq(key))
			return err
		})
		require.NoError(t, err)
		assert.Equal(t, storekit.Claimed, res.Outcome, "a released record is re-claimed, not taken over")
		assert.EqualValues(t, 2, res.Record.Attempt)
	})
}

// A claim whose statement waited for the row lock behind a Delete of the
// key inserts a new record once the delete commits: that record's times
// are the server's clock after the wait, not when the statement started.
// Before, PostgreSQL's insert carried the clock read at the statement's
// start (its values are built before the insert meets the locked row), so
// the new claim's heartbeat was older than the claim itself by the wait,
// and a claim right after it could take it over that much early.
func TestClaimBehindDelete(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		if d == sqlstore.MySQL {
			// Known and documented (doc.go): an insert builds its row,
			// times included, before InnoDB's duplicate check waits for
			// the deleting transaction, and reading the clock after a
			// locking read instead cost gap-lock deadlocks between claims
			// of new keys (45 and 167 in 9,600 claims, 2-3x slower).
			t.Skip("MySQL/MariaDB: a claim inserted behind a Delete carries its statement's start time")
		}
		claimBehindDelete(t, newEnv(t, d))
	})
}

func claimBehindDelete(t *testing.T, e *env) {
	d := e.dialect
	ctx, key := ctxT(t), storageKey()
	r := claimReq(key)
	_, err := e.store.Claim(ctx, r)
	require.NoError(t, err)
	require.NoError(t, e.store.Release(ctx, key, r.Nonce)) // claimable again

	tx, err := sharedDB(t, d).BeginTx(ctx, nil)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback() }()
	_, err = tx.ExecContext(ctx, ph(d, "SELECT key_hash FROM "+e.table+" WHERE key_hash = ? FOR UPDATE"), key)
	require.NoError(t, err)
	var res storekit.ClaimResult
	done := make(chan error, 1)
	go func() {
		var err error
		res, err = e.store.Claim(ctx, claimReq(key))
		done <- err
	}()
	waitLockWait(t, d, e.table, done)
	time.Sleep(20 * time.Millisecond) // the delete's clock is past the waiting statement's start
	var deletedAt int64
	require.NoError(t, tx.QueryRowContext(ctx, "SELECT "+nowSQL(d)).Scan(&deletedAt))
	_, err = tx.ExecContext(ctx, ph(d, "DELETE FROM "+e.table+" WHERE key_hash = ?"), key)
	require.NoError(t, err)
	require.NoError(t, tx.Commit())
	require.NoError(t, <-done)

	assert.Equal(t, storekit.Claimed, res.Outcome)
	assert.EqualValues(t, 1, res.Record.Attempt, "a new record after the delete")
	assert.GreaterOrEqual(t, res.Record.HeartbeatAt, deletedAt, "the claim's heartbeat is read after the wait")
	assert.GreaterOrEqual(t, res.Record.StartedAt, deletedAt, "the claim's start is read after the wait")
	got, err := e.store.Get(ctx, key)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, got.HeartbeatAt, deletedAt, "the stored heartbeat is read after the wait")
}
