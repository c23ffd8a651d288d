//go:build unix

package main

import (
	"net/url"
	"path/filepath"
	"testing"
)

// TestBinarySQLite: the binary on a SQLite file (sqlite://PATH, created by
// migrate=1): a command runs once across processes and is replayed, and
// inspect, unlock -force and purge work.
func TestBinarySQLite(t *testing.T) {
	sqlCLI(t, "SQLite", "sqlite://"+filepath.Join(t.TempDir(), "idem.db")+"?table=idem_cli")
}

// TestSQLiteSpec: the spellings of a SQLite store and the DSN they give.
func TestSQLiteSpec(t *testing.T) {
	for spec, want := range map[string]string{
		"sqlite:///var/lib/idem.db":                "file:/var/lib/idem.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate",
		"sqlite://idem.db?_pragma=foreign_keys(1)": "file:idem.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate&_pragma=foreign_keys%281%29",
		"sqlite:idem.db":                           "file:idem.db?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate",
	} {
		u, err := sqliteURL(spec)
		if err != nil {
			t.Fatalf("%s: %v", spec, err)
		}
		got, err := sqliteDSN(u)
		if err != nil || got != want {
			t.Errorf("%s: %q, %v; want %q", spec, got, err, want)
		}
	}
	if _, err := sqliteDSN(&url.URL{Scheme: "sqlite"}); err == nil {
		t.Error("sqlite:// without a path: no error")
	}
}
