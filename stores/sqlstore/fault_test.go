package sqlstore_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/sqlstore"
)

// faults is a database/sql driver wrapper that fails every other execution
// of each statement naming the table with an error the database sends
// when it rolled the statement back (a deadlock, a serialization failure):
// the first send of every statement fails, its second succeeds.
type faults struct {
	table string
	errs  []error // injected in turn
	on    atomic.Bool

	mu    sync.Mutex
	sent  map[string]int // executions of each statement text
	fails map[string]int // of which failed here
	n     int
}

// fault reports the error to fail an execution of query with, or nil.
func (f *faults) fault(query string) error {
	if !f.on.Load() || !strings.Contains(query, f.table) {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sent[query]++
	if f.sent[query]%2 == 0 {
		return nil
	}
	f.fails[query]++
	f.n++
	return f.errs[f.n%len(f.errs)]
}

// counts returns, per statement (its first words), how often it was sent
// and how often it failed here.
func (f *faults) counts() map[string][2]int {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][2]int{}
	for q, n := range f.sent {
		out[q] = [2]int{n, f.fails[q]}
	}
	return out
}

type faultConnector struct {
	driver.Connector
	f *faults
}

func (c faultConnector) Connect(ctx context.Context) (driver.Conn, error) {
	conn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return &faultConn{Conn: conn, f: c.f}, nil
}

type faultConn struct {
	driver.Conn
	f *faults
}

func (c *faultConn) PrepareContext(ctx context.Context, query string) (driver.Stmt, error) {
	st, err := c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, query)
	if err != nil {
		return nil, err
	}
	return &faultStmt{Stmt: st, query: query, f: c.f}, nil
}

func (c *faultConn) CheckNamedValue(v *driver.NamedValue) error {
	if nc, ok := c.Conn.(driver.NamedValueChecker); ok {
		return nc.CheckNamedValue(v)
	}
	return driver.ErrSkip
}

func (c *faultConn) ResetSession(ctx context.Context) error {
	if r, ok := c.Conn.(driver.SessionResetter); ok {
		return r.ResetSession(ctx)
	}
	return nil
}

type faultStmt struct {
	driver.Stmt
	query string
	f     *faults
}

func (s *faultStmt) ExecContext(ctx context.Context, args []driver.NamedValue) (driver.Result, error) {
	if err := s.f.fault(s.query); err != nil {
		return nil, err
	}
	return s.Stmt.(driver.StmtExecContext).ExecContext(ctx, args)
}

func (s *faultStmt) QueryContext(ctx context.Context, args []driver.NamedValue) (driver.Rows, error) {
	if err := s.f.fault(s.query); err != nil {
		return nil, err
	}
	return s.Stmt.(driver.StmtQueryContext).QueryContext(ctx, args)
}

// newFaultEnv returns a store on a fresh table over a pool whose
// statements on that table fail every other send with f's errors (once
// the table exists).
func newFaultEnv(t *testing.T, d sqlstore.Dialect) (*env, *faults) {
	t.Helper()
	var (
		inner driver.Connector
		errs  []error
	)
	switch d {
	case sqlstore.Postgres:
		cfg, err := pgx.ParseConfig(dsn(t, d))
		require.NoError(t, err)
		inner = stdlib.GetConnector(*cfg)
		errs = []error{
			&pgconn.PgError{Severity: "ERROR", Code: "40001", Message: "could not serialize access due to concurrent update"},
			&pgconn.PgError{Severity: "ERROR", Code: "40P01", Message: "deadlock detected"},
		}
	default:
		cfg, err := mysql.ParseDSN(dsn(t, d))
		require.NoError(t, err)
		inner, err = mysql.NewConnector(cfg)
		require.NoError(t, err)
		errs = []error{&mysql.MySQLError{Number: 1213, SQLState: [5]byte{'4', '0', '0', '0', '1'},
			Message: "Deadlock found when trying to get lock; try restarting transaction"}}
	}
	f := &faults{errs: errs, sent: map[string]int{}, fails: map[string]int{}}
	db := sql.OpenDB(faultConnector{Connector: inner, f: f})
	t.Cleanup(func() { _ = db.Close() })
	e := newEnvOn(t, d, db, nil)
	f.table = e.table
	f.on.Store(true)
	return e, f
}

// TestTransientErrorsRetriedInEveryStatement: the first send of every
// statement (claim, takeover, get, heartbeat, complete, release, delete)
// fails with a deadlock or serialization failure (MariaDB 1213, SQLSTATE
// 40001; PostgreSQL 40001, 40P01), which the database answers after
// rolling the statement back. Every store call succeeds, each statement
// having been sent again; and under a Guard, fn runs exactly once.
func TestTransientErrorsRetriedInEveryStatement(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		e, f := newFaultEnv(t, d)
		storeCallsRetried(t, d, e, f)
		guardCallsRetried(t, e, f)
	})
}

// storeCallsRetried makes every store call of a key's life once under
// faults, and checks that every statement was sent again after each
// failure.
func storeCallsRetried(t *testing.T, d sqlstore.Dialect, e *env, f *faults) {
	s := e.store
	ctx := ctxT(t)

	key := storageKey()
	r := claimReq(key)
	res, err := s.Claim(ctx, r)
	require.NoError(t, err, "claim")
	require.Equal(t, storekit.Claimed, res.Outcome)
	require.NoError(t, s.Heartbeat(ctx, key, r.Nonce, time.Minute), "heartbeat")
	rec, err := s.Get(ctx, key)
	require.NoError(t, err, "get")
	require.Equal(t, r.Nonce, rec.Nonce)
	f.on.Store(false)
	age(t, e, key, time.Minute) // stale: the next claim takes over
	f.on.Store(true)
	r2 := claimReq(key)
	res, err = s.Claim(ctx, r2)
	require.NoError(t, err, "takeover")
	require.Equal(t, storekit.TookOver, res.Outcome)
	require.NoError(t, s.Release(ctx, key, r2.Nonce), "release")
	r3 := claimReq(key)
	res, err = s.Claim(ctx, r3)
	require.NoError(t, err, "re-claim")
	require.Equal(t, storekit.Claimed, res.Outcome)
	require.NoError(t, s.Complete(ctx, key, r3.Nonce,
		storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`"v"`), TTL: time.Hour}), "complete")
	res, err = s.Claim(ctx, claimReq(key))
	require.NoError(t, err, "claim of a completed key")
	require.Equal(t, storekit.Existing, res.Outcome)
	require.NoError(t, s.Delete(ctx, key), "delete")
	_, err = s.Get(ctx, key)
	require.ErrorIs(t, err, storekit.ErrNotFound)

	// Every statement sent failed on its first send and was sent
	// again: each text was sent twice per failure.
	counts := f.counts()
	for q, c := range counts {
		assert.Equal(t, 2*c[1], c[0], "sends of %q, %d failed", q, c[1])
	}
	wantStmts := 6 // claim, get, heartbeat, complete, release, delete
	if d == sqlstore.MySQL {
		wantStmts = 7 // and the conditional takeover
	}
	assert.Len(t, counts, wantStmts, "distinct statements")
}

// guardCallsRetried runs Guard calls under faults: claim, heartbeats,
// completion, replays, a failure released and retried.
func guardCallsRetried(t *testing.T, e *env, f *faults) {
	s := e.store
	ctx := ctxT(t)
	g := newGuard[string](t, s, idem.WithHeartbeat(5*time.Millisecond), idem.WithTakeoverAfter(2*time.Second))
	var runs atomic.Int32
	fn := func(context.Context) (string, error) {
		runs.Add(1)
		time.Sleep(60 * time.Millisecond) // some heartbeats
		return "v", nil
	}
	before := f.counts()
	for range 3 {
		v, err := g.Do(ctx, "once", fn)
		require.NoError(t, err)
		require.Equal(t, "v", v)
	}
	assert.Equal(t, int32(1), runs.Load(), "fn runs")
	boom := errors.New("boom")
	var failures atomic.Int32
	v, err := g.Do(ctx, "fails-once", func(ctx context.Context) (string, error) {
		if failures.Add(1) == 1 {
			return "", boom
		}
		return "w", nil
	})
	require.ErrorIs(t, err, boom)
	require.Empty(t, v)
	v, err = g.Do(ctx, "fails-once", func(ctx context.Context) (string, error) {
		failures.Add(1)
		return "w", nil
	})
	require.NoError(t, err)
	require.Equal(t, "w", v)
	assert.Equal(t, int32(2), failures.Load(), "a released failure runs again, once")
	var injected int
	for q, c := range f.counts() {
		injected += c[1] - before[q][1]
	}
	assert.Positive(t, injected)
	t.Logf("Guard calls: %d faults injected", injected)
}
