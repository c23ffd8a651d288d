// Command benchtable prints the PostgreSQL store's cost tables (-postgres,
// default $IDEM_POSTGRES_DSN): the median and 90th percentile Wait wake-up
// of a waiter in another Guard after the owner returns, woken by
// LISTEN/NOTIFY against the Guard's poll (-postgres-samples calls each, 15
// by default: a few seconds); what a sqlstore.DoTx whose fn inserts one row
// costs next to the same INSERT in a plain transaction (time and round trips
// per call, -postgres-calls calls); and the same for the steps of a call: a
// Step, a sqlstore.StepTx that runs and one replayed. It fails if a StepTx
// costs other than 2 round trips more than the plain transaction, or a
// replayed one other than 1.
//
//	go run ./stores/sqlstore/internal/benchtable -postgres postgres://postgres@127.0.0.1:5432/test
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/idem-go/idem/stores/sqlstore/internal/sqlbench"
)

func main() {
	dsn := flag.String("postgres", os.Getenv("IDEM_POSTGRES_DSN"), "PostgreSQL DSN")
	samples := flag.Int("postgres-samples", 15, "Wait wake-up samples per waiter kind")
	calls := flag.Int("postgres-calls", 200, "calls per row in the DoTx and steps tables")
	flag.Parse()
	if *dsn == "" {
		fmt.Fprintln(os.Stderr, "benchtable: no PostgreSQL DSN: give -postgres (or set IDEM_POSTGRES_DSN)")
		os.Exit(2)
	}
	if *samples < 1 || *calls < 1 {
		fmt.Fprintln(os.Stderr, "-postgres-samples and -postgres-calls must be at least 1")
		os.Exit(2)
	}
	ctx := context.Background()
	if err := sqlbench.WakeTable(ctx, os.Stdout, *dsn, *samples); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable: Wait wake-up:", err)
		os.Exit(1)
	}
	if err := sqlbench.TxTable(ctx, os.Stdout, *dsn, *calls); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable: DoTx:", err)
		os.Exit(1)
	}
	if err := sqlbench.StepTxTable(ctx, os.Stdout, *dsn, *calls); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable: StepTx:", err)
		os.Exit(1)
	}
}
