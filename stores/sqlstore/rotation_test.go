package sqlstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/sqlstore"
	"github.com/idem-go/idem/stores/storetest"
)

// TestRotation runs storetest's secret rotation checks (every case of a
// record found under a previous secret, a tie mid-deploy, goroutines as
// each deploy runs them) on PostgreSQL and MariaDB, each store on a fresh
// table.
func TestRotation(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		storetest.RunRotation(t, func(t *testing.T) storekit.Store { return newEnv(t, d).store })
	})
}

// TestRotationProcesses: 4 processes (each with its own pool) on
// PostgreSQL, two
// configured WithSecret(A, B) and two WithSecret(B, A), as while a
// rotation's second deploy rolls, x 16 goroutines with a Guard each, call
// the same 12 keys: each key runs once and every caller gets its result.
func TestRotationProcesses(t *testing.T) {
	t.Run(sqlstore.Postgres.String(), func(t *testing.T) {
		d := sqlstore.Postgres
		table := "idem_rot_" + randHex(6)
		t.Cleanup(func() { dropTable(t, d, table) })
		storetest.RunRotationProcesses(t, storetest.ProcessConfig{
			Namespace: table,
			NewStore: func(table string) (storekit.Store, error) {
				s, err := sqlstore.New(sharedDB(t, d), d, sqlstore.WithTable(table))
				if err != nil {
					return nil, err
				}
				return s, s.Migrate(context.Background())
			},
		})
	})
}

// TestRotationOrders: six processes on PostgreSQL, each configured with
// another order of three secrets (every order of a rotation at once), x 4
// goroutines with a Guard each, call the same 30 keys, with a 2s takeover
// threshold, under Return, Raise and Wait, plain and with a step whose
// call fails its first attempt (so it is released and retried by a
// process with another order): each key runs once, charges once, and
// every caller that gets a result gets that run's.
func TestRotationOrders(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	d := sqlstore.Postgres
	storetest.RunRotationOrders(t, storetest.ProcessConfig{
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
	})
}
