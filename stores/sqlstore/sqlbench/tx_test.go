package sqlbench_test

import (
	"context"
	"os"
	"testing"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/sqlstore/sqlbench"
)

// TestTxTable prints the DoTx table (what idem-bench prints) from a few
// calls; it checks the table is made, not figures.
func TestTxTable(t *testing.T) {
	if err := sqlbench.TxTable(context.Background(), os.Stdout, testenv.PostgresDSN(t), 20); err != nil {
		t.Fatal(err)
	}
}
