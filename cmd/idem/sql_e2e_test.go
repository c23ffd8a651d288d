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
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("table", sqlTable(t, "pgx", dsn))
	u.RawQuery = q.Encode()
	sqlCLI(t, "PostgreSQL", u.String())
}

func TestBinaryMySQL(t *testing.T) {
	dsn := testenv.MySQLDSN(t)
	cfg, err := mysql.ParseDSN(dsn)
	if err != nil {
		t.Fatal(err)
	}
	u := url.URL{Scheme: "mysql", Host: cfg.Addr, Path: "/" + cfg.DBName, RawQuery: "table=" + sqlTable(t, "mysql", dsn)}
	if cfg.Passwd != "" {
		u.User = url.UserPassword(cfg.User, cfg.Passwd)
	} else {
		u.User = url.User(cfg.User)
	}
	sqlCLI(t, "MySQL", u.String())
}

// sqlCLI runs the binary on a SQL store: the table is made by migrate=1,
// a command runs once across processes and is replayed, and inspect,
// unlock -force and purge work.
func sqlCLI(t *testing.T, name, store string) {
	e := env{"COUNTER": filepath.Join(t.TempDir(), "counter")}
	key := randomKey(t)
	cmd := []string{"--", "sh", "-c", `echo run >> "$COUNTER"; echo "token $IDEM_FENCING_TOKEN"`}
	iv := runBin(t, e, append([]string{"run", "-store", store + "&migrate=1", "-key", key}, cmd...)...)
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
