package integration

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/go-sql-driver/mysql"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/sqlstore"
)

// mysqlServerVersion is the version the "mysql-procedure" backend's pool
// reports: a MySQL server, which has no INSERT ... RETURNING, so the store
// claims through the claim procedure Migrate makes, as it does on MySQL.
const mysqlServerVersion = "8.0.40"

// versionConnector hands out the test MariaDB's connections with one
// query answered differently: SELECT VERSION() reports
// mysqlServerVersion. Everything else goes to the server as sent.
type versionConnector struct{ driver.Connector }

func (c versionConnector) Connect(ctx context.Context) (driver.Conn, error) {
	cn, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	return versionConn{cn}, nil
}

// versionConn is a go-sql-driver/mysql connection whose QueryContext
// rewrites SELECT VERSION(); the interfaces database/sql looks for are
// forwarded.
type versionConn struct{ driver.Conn }

func (c versionConn) QueryContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Rows, error) {
	if strings.EqualFold(strings.TrimSpace(q), "SELECT VERSION()") {
		q = "SELECT '" + mysqlServerVersion + "'"
	}
	return c.Conn.(driver.QueryerContext).QueryContext(ctx, q, args)
}

func (c versionConn) ExecContext(ctx context.Context, q string, args []driver.NamedValue) (driver.Result, error) {
	return c.Conn.(driver.ExecerContext).ExecContext(ctx, q, args)
}

func (c versionConn) PrepareContext(ctx context.Context, q string) (driver.Stmt, error) {
	return c.Conn.(driver.ConnPrepareContext).PrepareContext(ctx, q)
}

func (c versionConn) BeginTx(ctx context.Context, opts driver.TxOptions) (driver.Tx, error) {
	return c.Conn.(driver.ConnBeginTx).BeginTx(ctx, opts)
}

func (c versionConn) Ping(ctx context.Context) error { return c.Conn.(driver.Pinger).Ping(ctx) }

func (c versionConn) ResetSession(ctx context.Context) error {
	return c.Conn.(driver.SessionResetter).ResetSession(ctx)
}

func (c versionConn) IsValid() bool { return c.Conn.(driver.Validator).IsValid() }

func (c versionConn) CheckNamedValue(nv *driver.NamedValue) error {
	return c.Conn.(driver.NamedValueChecker).CheckNamedValue(nv)
}

// openMySQLProcedure opens a MySQL store on the test MariaDB through a pool
// that reports a MySQL server, so that every claim goes through the claim
// procedure (one CALL) instead of MariaDB's INSERT ... RETURNING.
func openMySQLProcedure(t testing.TB) storekit.Store {
	t.Helper()
	return openSQLOn(t, mysqlPool(t, 16), sqlstore.MySQL)
}

// mysqlPool returns a pool of at most conns connections to the test
// MariaDB that reports mysqlServerVersion.
func mysqlPool(t testing.TB, conns int) *sql.DB {
	t.Helper()
	cfg, err := mysql.ParseDSN(testenv.MySQLDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	conn, err := mysql.NewConnector(cfg)
	if err != nil {
		t.Fatal(err)
	}
	db := sql.OpenDB(versionConnector{conn})
	db.SetMaxOpenConns(conns)
	db.SetMaxIdleConns(conns)
	t.Cleanup(func() { _ = db.Close() })
	var v string
	if err := db.QueryRowContext(ctxT(t), "SELECT VERSION()").Scan(&v); err != nil {
		testenv.Missing(t, "mysql ping: "+err.Error())
	}
	if v != mysqlServerVersion {
		t.Fatalf("the pool reports version %q, want %q", v, mysqlServerVersion)
	}
	return db
}

// TestMySQLProcedureClaims: the claims of a store on such a pool go
// through the claim procedure (its one connection counts a CALL per
// claim), so the linearizability run on the "mysql-procedure" backend
// checks that path.
func TestMySQLProcedureClaims(t *testing.T) {
	db := mysqlPool(t, 1)
	s := openSQLOn(t, db, sqlstore.MySQL)
	ctx := ctxT(t)
	calls := func() int64 {
		var name string
		var n int64
		if err := db.QueryRowContext(ctx, "SHOW SESSION STATUS LIKE 'Com_call_procedure'").Scan(&name, &n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	before := calls()
	const claims = 3
	for i := range claims {
		r := storekit.ClaimRequest{Key: storekit.StorageKeyPrefix + strings.Repeat(string(rune('a'+i)), 64), Nonce: "n1",
			LeaseTTL: time.Minute, TakeoverAfter: time.Minute}
		if _, err := s.Claim(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	if got := calls() - before; got != claims {
		t.Fatalf("%d claims made %d CALLs on the store's connection, want one each", claims, got)
	}
}
