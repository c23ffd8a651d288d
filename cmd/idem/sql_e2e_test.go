//go:build unix

package main

import (
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"

	"github.com/idem-go/idem/internal/testenv"
)

// sqlTable is a fresh table name; the test drops the table when it ends.
func sqlTable(t *testing.T, driver, dsn string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	table := "idem_cli_" + hex.EncodeToString(b[:])
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = db.Exec("DROP TABLE IF EXISTS " + table)
		if driver == "mysql" {
			_, _ = db.Exec("DROP PROCEDURE IF EXISTS " + table + "_claim_v2") // Migrate's claim procedure
		}
		_ = db.Close()
	})
	return table
}

func TestBinaryPostgres(t *testing.T) {
	dsn := testenv.PostgresDSN(t)
	sqlCLI(t, "PostgreSQL", postgresStore(t, dsn, sqlTable(t, "pgx", dsn)))
}

func TestBinaryMySQL(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	sqlCLI(t, "MySQL", mysqlStore(t, dsn, sqlTable(t, "mysql", dsn)))
}

// postgresStore is the -store of table on the PostgreSQL database dsn.
func postgresStore(t *testing.T, dsn, table string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("table", table)
	u.RawQuery = q.Encode()
	return u.String()
}

// mysqlStore is the -store of table on the MySQL database dsn.
func mysqlStore(t *testing.T, dsn, table string) string {
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u := url.URL{Scheme: "mysql", Host: cfg.Addr, Path: "/" + cfg.DBName, RawQuery: "table=" + table}
	if cfg.Passwd != "" {
		u.User = url.UserPassword(cfg.User, cfg.Passwd)
	} else {
		u.User = url.User(cfg.User)
	}
	return u.String()
}

// TestBinaryNoSchema: migrate=1 of a table in a schema (a MySQL database)
// that does not exist exits 78 and says the schema is missing.
func TestBinaryNoSchema(t *testing.T) {
	const table = "idem_none.records"
	for name, store := range map[string]func(t *testing.T) string{
		"SQLite": func(t *testing.T) string {
			return "sqlite://" + filepath.Join(t.TempDir(), "idem.db") + "?table=" + table
		},
		"PostgreSQL": func(t *testing.T) string { return postgresStore(t, testenv.PostgresDSN(t), table) },
		"MySQL":      func(t *testing.T) string { return mysqlStore(t, testenv.MySQLDSN(t), table) },
	} {
		t.Run(name, func(t *testing.T) {
			iv := runBin(t, env{}, "run", "-store", store(t)+"&migrate=1", "-key", randomKey(t), "--", "true")
			if iv.code != exitConfig || !strings.Contains(iv.stderr, "schema") {
				t.Errorf("migrate=1 in a schema that does not exist: %v, want exit %d and a message naming the schema", iv, exitConfig)
			}
		})
	}
}

// sqlCLI runs the binary on a SQL store: without the table it exits 78
// and says to add migrate=1, the table is made by migrate=1,
// a command runs once across processes and is replayed, and inspect,
// unlock -force and purge work.
func sqlCLI(t *testing.T, name, store string) {
	e := env{"COUNTER": filepath.Join(t.TempDir(), "counter")}
	key := randomKey(t)
	cmd := []string{"--", "sh", "-c", `echo run >> "$COUNTER"; echo "token $IDEM_FENCING_TOKEN"`}
	// Before the table exists: a configuration mistake, which names its fix.
	iv := runBin(t, e, append([]string{"run", "-store", store, "-key", key}, cmd...)...)
	if iv.code != exitConfig || !strings.Contains(iv.stderr, "?migrate=1") {
		t.Fatalf("run without the table: %v, want exit %d and a message naming ?migrate=1", iv, exitConfig)
	}
	if c := lines(t, e["COUNTER"]); c != 0 {
		t.Fatalf("the command ran %d times without the table, want 0", c)
	}
	iv = runBin(t, e, append([]string{"run", "-store", store + "&migrate=1", "-key", key}, cmd...)...)
	if iv.code != 0 || iv.stdout != "token 1\n" {
		t.Fatalf("first run (migrate=1): %v", iv)
	}
	iv = runBin(t, e, append([]string{"run", "-store", store, "-key", key}, cmd...)...)
	if iv.code != 0 || iv.stdout != "token 1\n" {
		t.Fatalf("replay: %v", iv)
	}
	if c := lines(t, e["COUNTER"]); c != 1 {
		t.Fatalf("the command ran %d times on %s, want 1", c, name)
	}
	if iv := runBin(t, e, "inspect", "-store", store, "-key", key); iv.code != 0 || !strings.Contains(iv.stdout, `"exit_code": 0`) {
		t.Errorf("inspect: %v", iv)
	}
	if iv := runBin(t, e, "unlock", "-store", store, "-key", key, "-force"); iv.code != 0 {
		t.Errorf("unlock -force: %v", iv)
	}
	if iv := runBin(t, e, "inspect", "-store", store, "-key", key); iv.code != exitNoRecord {
		t.Errorf("inspect after unlock -force: %v", iv)
	}
	if iv := runBin(t, e, "purge", "-store", store); iv.code != 0 || !strings.Contains(iv.stdout, "purged") {
		t.Errorf("purge: %v", iv)
	}
	t.Run("concurrent", func(t *testing.T) { concurrentOnce(t, store, 6) })
}

// TestBinaryUnknownStoreKind: a store kind the command does not know is
// refused with the list of the kinds it has.
func TestBinaryUnknownStoreKind(t *testing.T) {
	if iv := runBin(t, env{}, "run", "-store", "cassandra://localhost/ks", "-key", "k", "--", "true"); iv.code != exitConfig ||
		!strings.Contains(iv.stderr, "postgres://") || !strings.Contains(iv.stderr, "mysql://") || !strings.Contains(iv.stderr, "redis://") {
		t.Errorf("unknown store kind: %v", iv)
	}
}
