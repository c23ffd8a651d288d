package sqlbench_test

import (
	"context"
	"os"
	"testing"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/sqlstore/internal/sqlbench"
)

// TestTxTable prints the DoTx table (what benchtable prints) from a few
// calls; it checks the table is made, not figures.
func TestTxTable(t *testing.T) {
	if err := sqlbench.TxTable(context.Background(), os.Stdout, testenv.PostgresDSN(t), 20); err != nil {
		t.Fatal(err)
	}
}

// TestStepTxTable prints the steps table from a few calls, and so checks
// that a StepTx costs 2 round trips more than a plain transaction and a
// replayed one 1.
func TestStepTxTable(t *testing.T) {
	if err := sqlbench.StepTxTable(context.Background(), os.Stdout, testenv.PostgresDSN(t), 20); err != nil {
		t.Fatal(err)
	}
}
