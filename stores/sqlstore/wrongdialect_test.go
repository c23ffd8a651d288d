package sqlstore_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/stores/sqlstore"
)

// opaqueDriver hides a driver's type, as a wrapper (tracing, metrics)
// does: New cannot tell the database from it, Migrate asks the server.
type opaqueDriver struct{ drv driver.Driver }

func (d opaqueDriver) Open(name string) (driver.Conn, error) { return d.drv.Open(name) }

type opaqueConnector struct {
	drv driver.Driver
	dsn string
}

func (c opaqueConnector) Connect(context.Context) (driver.Conn, error) { return c.drv.Open(c.dsn) }
func (c opaqueConnector) Driver() driver.Driver                        { return opaqueDriver{c.drv} }

// TestWrongDialect: every wrong pairing of dialect and database is an
// error matching storekit.ErrInvalidOption that names the dialect to use: at
// New by the driver, and at Migrate by the server when the driver is
// hidden. (A PostgreSQL database opened with sqlstore.MySQL failed in
// Migrate with a syntax error at "`".)
func TestWrongDialect(t *testing.T) {
	dbs := map[sqlstore.Dialect]struct{ name, dsn string }{
		sqlstore.Postgres: {"pgx", dsn(t, sqlstore.Postgres)},
		sqlstore.MySQL:    {"mysql", dsn(t, sqlstore.MySQL)},
		sqlstore.SQLite:   {"sqlite", "file:" + filepath.Join(t.TempDir(), "wrong.db") + "?" + sqlstore.SQLiteDSNParams},
	}
	all := []sqlstore.Dialect{sqlstore.Postgres, sqlstore.MySQL, sqlstore.SQLite}
	for actual, src := range dbs {
		db, err := sql.Open(src.name, src.dsn)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = db.Close() })
		hidden := sql.OpenDB(opaqueConnector{drv: db.Driver(), dsn: src.dsn})
		t.Cleanup(func() { _ = hidden.Close() })
		want := "use sqlstore." + map[sqlstore.Dialect]string{sqlstore.Postgres: "Postgres", sqlstore.MySQL: "MySQL", sqlstore.SQLite: "SQLite"}[actual]
		for _, given := range all {
			table := "wrongdialect_" + randTable()
			_, err := sqlstore.New(db, given, sqlstore.WithTable(table), sqlstore.WithoutCleanup())
			check(t, actual, given, "New", err, want)

			s, err := sqlstore.New(hidden, given, sqlstore.WithTable(table), sqlstore.WithoutCleanup())
			if err != nil {
				t.Fatalf("%v database, dialect %v, driver hidden: New: %v", actual, given, err)
			}
			err = s.Migrate(context.Background())
			check(t, actual, given, "Migrate", err, want)
			if err == nil {
				_, _ = db.Exec("DROP TABLE " + table)
			}
		}
	}
}

func check(t *testing.T, actual, given sqlstore.Dialect, at string, err error, want string) {
	t.Helper()
	if actual == given {
		if err != nil {
			t.Errorf("%v database, dialect %v: %s: %v", actual, given, at, err)
		}
		return
	}
	if !errors.Is(err, storekit.ErrInvalidOption) || !strings.Contains(err.Error(), want) {
		t.Errorf("%v database, dialect %v: %s: %v, want ErrInvalidOption saying %q", actual, given, at, err, want)
	}
}

func randTable() string { return randHex(6) }
