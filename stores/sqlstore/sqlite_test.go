package sqlstore_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"sync"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/sqlstore"
	"github.com/idem-go/idem/stores/storetest"
)

var (
	sqliteDirOnce sync.Once
	sqliteDir     string
)

// sqliteDSN is the database file of this test process (and of the
// processes it starts, which inherit IDEM_SQLITE_TEST_FILE).
func sqliteDSN() string {
	sqliteDirOnce.Do(func() {
		if f := os.Getenv("IDEM_SQLITE_TEST_FILE"); f != "" {
			sqliteDir = f
			return
		}
		dir, err := os.MkdirTemp("", "idem-sqlite-")
		if err != nil {
			panic(err)
		}
		sqliteDir = filepath.Join(dir, "idem.db")
		os.Setenv("IDEM_SQLITE_TEST_FILE", sqliteDir)
	})
	return "file:" + sqliteDir + "?" + sqlstore.SQLiteDSNParams
}

func openSQLite(t testing.TB, source string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", source)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// sqliteStore opens a store on table over a pool of its own (one per
// process, as an application has).
func sqliteStore(table string) (idem.Store, error) {
	db, err := sql.Open("sqlite", sqliteDSN())
	if err != nil {
		return nil, err
	}
	s, err := sqlstore.New(db, sqlstore.SQLite, sqlstore.WithTable(table))
	if err != nil {
		return nil, err
	}
	return s, s.Migrate(context.Background())
}

// TestSQLiteConformance runs the conformance suite on SQLite, each store
// on a fresh table of its own in one database file.
func TestSQLiteConformance(t *testing.T) {
	d := sqlstore.SQLite
	var envs sync.Map // idem.Store -> *env
	storetest.Run(t, func(t *testing.T) idem.Store {
		e := newEnv(t, d)
		envs.Store(idem.Store(e.store), e)
		return e.store
	}, storetest.WithCorrupter(func(t *testing.T, s idem.Store, key string) {
		v, ok := envs.Load(s)
		if !ok {
			t.Fatal("corrupter: unknown store")
		}
		corrupt(t, v.(*env), key, "status = 'garbled'")
	}))
}

// TestSQLiteMultiProcessExactlyOnce: storetest's processes on one SQLite
// file, each process with its own pool.
func TestSQLiteMultiProcessExactlyOnce(t *testing.T) {
	table := "idem_p_" + randHex(6)
	t.Cleanup(func() { dropTable(t, sqlstore.SQLite, table) })
	storetest.RunProcesses(t, storetest.ProcessConfig{Namespace: table, NewStore: sqliteStore})
}

// TestSQLiteStepCrash: storetest's step crash harness on SQLite.
func TestSQLiteStepCrash(t *testing.T) {
	table := "idem_st_" + randHex(6)
	t.Cleanup(func() { dropTable(t, sqlstore.SQLite, table) })
	storetest.RunStepCrash(t, storetest.StepCrashConfig{Namespace: table, NewStore: sqliteStore})
}
