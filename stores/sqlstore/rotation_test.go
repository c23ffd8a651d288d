package sqlstore_test

import (
	"context"
	"testing"

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
		storetest.RunRotation(t, func(t *testing.T) idem.Store { return newEnv(t, d).store })
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
			NewStore: func(table string) (idem.Store, error) {
				s, err := sqlstore.New(sharedDB(t, d), d, sqlstore.WithTable(table))
				if err != nil {
					return nil, err
				}
				return s, s.Migrate(context.Background())
			},
		})
	})
}
