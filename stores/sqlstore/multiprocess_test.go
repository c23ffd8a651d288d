package sqlstore_test

import (
	"context"
	"testing"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/stores/sqlstore"
	"github.com/idem-go/idem/stores/storetest"
)

// TestMultiProcessExactlyOnce: 4 processes (each with its own connection
// pool) x 16 goroutines (each with its own Guard) call the same 12 keys:
// each key runs once, and all 64 callers get its result.
func TestMultiProcessExactlyOnce(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		table := "idem_p_" + randHex(6)
		t.Cleanup(func() { dropTable(t, d, table) })
		storetest.RunProcesses(t, storetest.ProcessConfig{
			Namespace: table,
			NewStore: func(table string) (storekit.Store, error) {
				s, err := sqlstore.New(sharedDB(t, d), d, sqlstore.WithTable(table))
				if err != nil {
					return nil, err
				}
				return s, s.Migrate(context.Background()) // the table exists once the test process made it
			},
		})
	})
}

// TestStepCrash: storetest's step crash harness on each dialect: an owner
// process SIGKILLed after a step or inside one, or SIGSTOPped inside one,
// and the call taken over by other processes (steps are ordinary records,
// so the store needs nothing of its own for them).
func TestStepCrash(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		table := "idem_st_" + randHex(6)
		t.Cleanup(func() { dropTable(t, d, table) })
		storetest.RunStepCrash(t, storetest.StepCrashConfig{
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
