package sqlstore_test

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/sqlstore"
	"github.com/idem-go/idem/stores/storetest"
)

// TestConformance runs storetest's suites on real PostgreSQL and MariaDB
// and on SQLite, each store on a fresh table of its own (SQLite's in one
// database file): the store's operations, its listing, its clean-up with
// retention 0 and 2s (Purge keeps a record until its retention has passed
// on the server's clock), secret rotation, processes sharing a table (each
// with its own pool), and owners killed or stopped in the middle of a
// call's steps (steps are ordinary records, so the store needs nothing of
// its own for them); SQLite's clean-up with retention 0 on a database file
// of its own. mysql-procedure and mysql-two-statements run the
// store's checks on MariaDB with the claims of MySQL servers without
// INSERT ... RETURNING (the claim procedure; INSERT IGNORE then a SELECT
// where the procedure is missing), so that both paths stay checked where
// the test server has RETURNING; postgres-listen runs them, Watch
// included, on WatchingStores.
func TestConformance(t *testing.T) {
	for _, d := range dialects {
		t.Run(d.String(), func(t *testing.T) { storetest.Run(t, serverHarness(t, d)) })
	}
	for _, procedure := range []bool{true, false} {
		name := "mysql-two-statements"
		if procedure {
			name = "mysql-procedure"
		}
		t.Run(name, func(t *testing.T) {
			h := newHarness(func(e *env) storekit.Store {
				sqlstore.SetReturning(e.store, false)
				sqlstore.SetProcedure(e.store, procedure)
				return e.store
			})
			storetest.Run(t, h.harness(sqlstore.MySQL))
		})
	}
	t.Run("postgres-listen", func(t *testing.T) {
		h := newHarness(func(e *env) storekit.Store { return listen(t, e.store) })
		hs := h.harness(sqlstore.Postgres)
		hs.Watch = true
		storetest.Run(t, hs)
	})
	t.Run(sqlstore.SQLite.String(), func(t *testing.T) {
		d := sqlstore.SQLite
		hs := newHarness(nil).harness(d)
		hs.Purge = []storetest.Purge{{
			// A database file of its own, with retention 0.
			NewStore: func(t *testing.T) storekit.Store {
				db := openSQLite(t, "file:"+filepath.Join(t.TempDir(), "idem.db")+"?"+sqlstore.SQLiteDSNParams)
				t.Cleanup(func() { _ = db.Close() })
				return newEnvOn(t, d, db, nil, sqlstore.WithRetention(0)).store
			},
			ClockSkew: 100 * time.Millisecond,
		}}
		hs.Processes = &storetest.ProcessConfig{Namespace: newTable(t, d, "idem_p_"), NewStore: sqliteStore}
		hs.StepCrash = &storetest.StepCrashConfig{Namespace: newTable(t, d, "idem_st_"), NewStore: sqliteStore}
		// SQLite keeps the threshold for a dead process; a restart with
		// the same instance ID is known at once.
		hs.DeadOwner = &storetest.DeadOwnerConfig{Namespace: newTable(t, d, "idem_dead_"), NewStore: sqliteStore}
		storetest.Run(t, hs)
	})
}

// harness makes the stores of a Harness on fresh tables and corrupts
// their rows.
type harness struct {
	envs sync.Map // storekit.Store -> *env
	use  func(e *env) storekit.Store
}

// newHarness returns a harness whose stores are use(e) for each fresh
// env e (nil: e.store).
func newHarness(use func(e *env) storekit.Store) *harness {
	if use == nil {
		use = func(e *env) storekit.Store { return e.store }
	}
	return &harness{use: use}
}

// harness returns the Harness of the store's checks on dialect d: a
// store per subtest, and a corrupter that gives a row a status this
// version does not know.
func (h *harness) harness(d sqlstore.Dialect) storetest.Harness {
	return storetest.Harness{
		NewStore: func(t *testing.T) storekit.Store {
			e := newEnv(t, d)
			s := h.use(e)
			h.envs.Store(s, e)
			return s
		},
		Corrupt: func(t *testing.T, s storekit.Store, key string) {
			v, ok := h.envs.Load(s)
			if !ok {
				t.Fatal("corrupter: unknown store")
			}
			corrupt(t, v.(*env), key, "status = 'garbled'")
		},
	}
}

// serverHarness is the whole Harness of dialect d on its server.
func serverHarness(t *testing.T, d sqlstore.Dialect) storetest.Harness {
	h := newHarness(nil).harness(d)
	h.List = func(t *testing.T) storekit.Store { return newEnv(t, d).store }
	h.Rotation = true
	for _, retention := range []time.Duration{0, 2 * time.Second} {
		h.Purge = append(h.Purge, storetest.Purge{
			NewStore: func(t *testing.T) storekit.Store {
				return newEnv(t, d, sqlstore.WithRetention(retention)).store
			},
			Retention: retention,
			ClockSkew: 100 * time.Millisecond,
		})
	}
	// Processes each with a pool of its own, on a table the test process
	// makes (its first NewStore) before the children start.
	processStore := func(table string) (storekit.Store, error) {
		s, err := sqlstore.New(sharedDB(t, d), d, sqlstore.WithTable(table))
		if err != nil {
			return nil, err
		}
		return s, s.Migrate(context.Background())
	}
	h.Processes = &storetest.ProcessConfig{Namespace: newTable(t, d, "idem_p_"), NewStore: processStore}
	h.StepCrash = &storetest.StepCrashConfig{Namespace: newTable(t, d, "idem_st_"), NewStore: processStore}
	h.DeadOwner = &storetest.DeadOwnerConfig{Namespace: newTable(t, d, "idem_dead_"), NewStore: processStore, Presence: true}
	if d != sqlstore.Postgres {
		return h
	}
	// 4 processes, two configured WithSecret(A, B) and two WithSecret(B,
	// A), as while a rotation's second deploy rolls.
	h.RotationProcesses = &storetest.ProcessConfig{Namespace: newTable(t, d, "idem_rot_"), NewStore: processStore}
	if testing.Short() {
		return h
	}
	// Six processes, each with another order of three secrets, x 4
	// goroutines with a Guard each, on the same 30 keys with a 2s
	// takeover threshold.
	h.RotationOrders = &storetest.ProcessConfig{
		Namespace:  "idem_rot_" + randHex(6),
		Goroutines: 4,
		Keys:       30,
		Options:    []idem.Option{idem.WithTakeoverAfter(2 * time.Second)},
		NewStore: func(table string) (storekit.Store, error) {
			// Six processes share the server's connections: a pool of
			// four each.
			db := openDB(t, d, dsn(t, d), nil)
			db.SetMaxOpenConns(4)
			t.Cleanup(func() { _ = db.Close() })
			s, err := sqlstore.New(db, d, sqlstore.WithTable(table))
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { dropTable(t, d, table) })
			return s, s.Migrate(context.Background())
		},
	}
	return h
}

// newTable returns a fresh table name starting with prefix, for a process
// suite, and drops the table at the end of t.
func newTable(t *testing.T, d sqlstore.Dialect, prefix string) string {
	table := prefix + randHex(6)
	t.Cleanup(func() { dropTable(t, d, table) })
	return table
}

// corrupt overwrites columns of key's row behind the store's back.
func corrupt(t testing.TB, e *env, key, set string) {
	t.Helper()
	q := "UPDATE " + e.table + " SET " + set + " WHERE key_hash = $1"
	if e.dialect == sqlstore.MySQL {
		q = "UPDATE " + e.table + " SET " + set + " WHERE key_hash = ?"
	}
	res, err := e.db.ExecContext(context.Background(), q, key)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 1 {
		t.Fatalf("corrupt: %d rows changed", n)
	}
}
