package integration

import (
	"context"
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/idem-go/idem/storekit"

	_ "modernc.org/sqlite" // database/sql driver "sqlite"

	"github.com/idem-go/idem/stores/sqlstore"
)

// The SQLite dialect runs every backend test (the linearizability runs
// included) on a file of its own, through a pool of its own.
func init() {
	backends = append(backends, backend{name: "sqlite", open: openSQLite, cleans: true})
}

func openSQLite(t testing.TB) storekit.Store {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "idem.db")+"?"+sqlstore.SQLiteDSNParams)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	s, err := sqlstore.New(db, sqlstore.SQLite, sqlstore.WithRetention(0))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}
