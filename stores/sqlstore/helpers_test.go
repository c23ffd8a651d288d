package sqlstore_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/sqlstore"
	"github.com/idem-go/idem/stores/sqlstore/internal/sqlbench"
)

var dialects = []sqlstore.Dialect{sqlstore.Postgres, sqlstore.MySQL}

// forEachDialect runs f as a subtest per dialect.
func forEachDialect(t *testing.T, f func(t *testing.T, d sqlstore.Dialect)) {
	for _, d := range dialects {
		t.Run(d.String(), func(t *testing.T) { f(t, d) })
	}
}

// claimPaths are the claims a store can send: PostgreSQL's, and MySQL's
// three (INSERT ... RETURNING on MariaDB 10.5+; the claim procedure, what
// MySQL gets; INSERT IGNORE then SELECT, where the procedure is missing),
// all three run on the test's MariaDB.
var claimPaths = []string{"Postgres", "MySQL/returning", "MySQL/procedure", "MySQL/two-statements"}

// forEachClaim runs f as a subtest per claim path, with the path's
// dialect and use, which makes a store of that dialect take the path.
func forEachClaim(t *testing.T, f func(t *testing.T, path string, d sqlstore.Dialect, use func(*sqlstore.Store))) {
	for _, path := range claimPaths {
		d := sqlstore.MySQL
		if path == "Postgres" {
			d = sqlstore.Postgres
		}
		use := func(s *sqlstore.Store) {
			if d == sqlstore.MySQL {
				sqlstore.SetReturning(s, path == "MySQL/returning")
				sqlstore.SetProcedure(s, path == "MySQL/procedure")
			}
		}
		t.Run(path, func(t *testing.T) { f(t, path, d, use) })
	}
}

func dsn(t testing.TB, d sqlstore.Dialect) string {
	if d == sqlstore.SQLite {
		return sqliteDSN()
	}
	if d == sqlstore.Postgres {
		return testenv.PostgresDSN(t)
	}
	return testenv.MySQLDSN(t)
}

// openDB opens a pool whose connections count their round trips in rt
// (nil: not counted).
func openDB(t testing.TB, d sqlstore.Dialect, source string, rt *sqlbench.RoundTrips) *sql.DB {
	t.Helper()
	if rt == nil {
		rt = &sqlbench.RoundTrips{}
	}
	var db *sql.DB
	switch d {
	case sqlstore.SQLite:
		db = openSQLite(t, source)
	case sqlstore.Postgres:
		cfg, err := pgx.ParseConfig(source)
		if err != nil {
			t.Fatal(err)
		}
		cfg.DialFunc = rt.Dial
		db = stdlib.OpenDB(*cfg)
	default:
		cfg, err := mysql.ParseDSN(source)
		if err != nil {
			t.Fatal(err)
		}
		cfg.DialFunc = rt.Dial
		conn, err := mysql.NewConnector(cfg)
		if err != nil {
			t.Fatal(err)
		}
		db = sql.OpenDB(conn)
	}
	db.SetMaxOpenConns(24)
	db.SetMaxIdleConns(24)
	db.SetConnMaxIdleTime(time.Minute)
	return db
}

var (
	sharedMu  sync.Mutex
	sharedDBs = map[sqlstore.Dialect]*sql.DB{}
)

// sharedDB is one pool per dialect for the tests of a process, so that
// parallel subtests do not exhaust the server's connections.
func sharedDB(t testing.TB, d sqlstore.Dialect) *sql.DB {
	t.Helper()
	source := dsn(t, d)
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if db := sharedDBs[d]; db != nil {
		return db
	}
	db := openDB(t, d, source, nil)
	sharedDBs[d] = db
	return db
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// storageKey returns a key shaped like the ones a Guard passes.
func storageKey() string { return storekit.StorageKeyPrefix + randHex(32) }

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

type env struct {
	dialect sqlstore.Dialect
	db      *sql.DB
	table   string
	store   *sqlstore.Store
	rt      *sqlbench.RoundTrips // nil on the shared pool
}

// newEnv returns a store on a fresh table of its own (dropped at the end of
// the test) over the dialect's shared pool.
func newEnv(t testing.TB, d sqlstore.Dialect, opts ...sqlstore.Option) *env {
	t.Helper()
	return newEnvOn(t, d, sharedDB(t, d), nil, opts...)
}

// newCountedEnv returns a store on a fresh table over a pool of its own
// with one connection, whose round trips are counted.
func newCountedEnv(t testing.TB, d sqlstore.Dialect, opts ...sqlstore.Option) *env {
	t.Helper()
	rt := &sqlbench.RoundTrips{}
	db := openDB(t, d, dsn(t, d), rt)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	return newEnvOn(t, d, db, rt, opts...)
}

func newEnvOn(t testing.TB, d sqlstore.Dialect, db *sql.DB, rt *sqlbench.RoundTrips, opts ...sqlstore.Option) *env {
	t.Helper()
	e := &env{dialect: d, db: db, table: "idem_t_" + randHex(6), rt: rt}
	s, err := sqlstore.New(db, d, append([]sqlstore.Option{sqlstore.WithTable(e.table)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	e.store = s
	t.Cleanup(func() {
		_ = s.Close()
		dropTable(t, d, e.table)
	})
	return e
}

// dropTable drops a store's table and, on MySQL, its claim procedure.
func dropTable(t testing.TB, d sqlstore.Dialect, table string) {
	_, _ = sharedDB(t, d).Exec("DROP TABLE IF EXISTS " + table)
	if d == sqlstore.MySQL {
		_, _ = sharedDB(t, d).Exec("DROP PROCEDURE IF EXISTS " + sqlstore.ClaimProcedure(table))
	}
}

// age moves the times of key's row d into the past, which is what d
// passing on the database's clock does to it.
func age(t testing.TB, e *env, key string, d time.Duration) {
	t.Helper()
	ms := d.Milliseconds()
	corrupt(t, e, key, fmt.Sprintf("started_at = started_at - %[1]d, heartbeat_at = heartbeat_at - %[1]d, "+
		"completed_at = CASE WHEN completed_at > 0 THEN completed_at - %[1]d ELSE 0 END, expires_at = expires_at - %[1]d, "+
		"taken_over_at = CASE WHEN taken_over_at > 0 THEN taken_over_at - %[1]d ELSE 0 END", ms))
}

// newFrozenMySQLEnv returns a MySQL store on a fresh table over a pool of
// its own whose sessions have their clock frozen (SET timestamp, which
// fixes NOW() and UTC_TIMESTAMP()).
func newFrozenMySQLEnv(t testing.TB) *env {
	t.Helper()
	cfg, err := mysql.ParseDSN(dsn(t, sqlstore.MySQL))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Params == nil {
		cfg.Params = map[string]string{}
	}
	cfg.Params["timestamp"] = fmt.Sprintf("%d.%06d", time.Now().Unix(), time.Now().Nanosecond()/1000)
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(conn)
	t.Cleanup(func() { _ = db.Close() })
	return newEnvOn(t, sqlstore.MySQL, db, nil)
}

func newGuard[T any](t testing.TB, s storekit.Store, opts ...idem.Option) *idem.Guard[T] {
	t.Helper()
	g, err := idem.New[T](s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// Claim timings of claimReq.
const (
	leaseTTL      = 5 * time.Minute
	takeoverAfter = 30 * time.Second
)

// claimReq is a claim on key with a fresh nonce and no payload.
func claimReq(key string) storekit.ClaimRequest {
	return storekit.ClaimRequest{Key: key, Nonce: randHex(16), LeaseTTL: leaseTTL, TakeoverAfter: takeoverAfter}
}
