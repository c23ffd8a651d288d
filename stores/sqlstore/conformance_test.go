package sqlstore_test

import (
	"context"
	"sync"
	"testing"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/stores/sqlstore"
	"github.com/idem-go/idem/stores/storetest"
)

// TestConformance runs the conformance suite on real PostgreSQL and
// MariaDB, each store on a fresh table of its own.
func TestConformance(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		var envs sync.Map // storekit.Store -> *env
		storetest.Run(t, func(t *testing.T) storekit.Store {
			e := newEnv(t, d)
			envs.Store(storekit.Store(e.store), e)
			return e.store
		}, storetest.WithCorrupter(func(t *testing.T, s storekit.Store, key string) {
			v, ok := envs.Load(s)
			if !ok {
				t.Fatal("corrupter: unknown store")
			}
			e := v.(*env)
			// A status this version does not know.
			corrupt(t, e, key, "status = 'garbled'")
		}))
	})
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

// TestConformanceInsertIgnore runs the conformance suite on MariaDB with
// the claims of MySQL servers without INSERT ... RETURNING: the claim
// procedure, and INSERT IGNORE then a SELECT where the procedure is
// missing, so that both paths stay checked where the test server has
// RETURNING.
func TestConformanceInsertIgnore(t *testing.T) {
	t.Run("procedure", func(t *testing.T) { testConformanceMySQL(t, true) })
	t.Run("two-statements", func(t *testing.T) { testConformanceMySQL(t, false) })
}

func testConformanceMySQL(t *testing.T, procedure bool) {
	var envs sync.Map // storekit.Store -> *env
	storetest.Run(t, func(t *testing.T) storekit.Store {
		e := newEnv(t, sqlstore.MySQL)
		sqlstore.SetReturning(e.store, false)
		sqlstore.SetProcedure(e.store, procedure)
		envs.Store(storekit.Store(e.store), e)
		return e.store
	}, storetest.WithCorrupter(func(t *testing.T, s storekit.Store, key string) {
		v, ok := envs.Load(s)
		if !ok {
			t.Fatal("corrupter: unknown store")
		}
		corrupt(t, v.(*env), key, "status = 'garbled'")
	}))
}
