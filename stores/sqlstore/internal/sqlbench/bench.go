// Package sqlbench measures the PostgreSQL store: the Wait wake-up (how
// long after the owner's call returns a waiter in another Guard returns,
// woken by LISTEN/NOTIFY (sqlstore.Store.Listen) or by the Guard's
// polling), and what DoTx and the steps of a call cost in time and round
// trips next to a plain transaction (RoundTrips counts them on the wire).
// It backs BenchmarkWaitWakeup and the round-trip counts of package
// sqlstore's tests, and the benchtable program.
package sqlbench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idem-go/idem/internal/benchkit"
	"github.com/idem-go/idem/stores/sqlstore"
)

// Open returns a pool over the PostgreSQL dsn through pgx's database/sql
// driver, the driver sqlstore.Store.Listen needs.
func Open(dsn string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	return stdlib.OpenDB(*cfg), nil
}

// WakeLatency measures, on PostgreSQL over db (opened with pgx's
// database/sql driver), how long after the owner's call returns a waiter
// in another Guard returns. The two Guards sit on stores of their own over
// one fresh table (created here, dropped at the end), as two processes
// would. With listen set the waiter's store is Store.Listen's, woken by
// LISTEN/NOTIFY; otherwise the plain Store, so its Guard polls with its
// capped backoff. The waiter has been waiting 100-300ms when the owner
// finishes. takeover sets both Guards' takeover threshold, which bounds the
// poll interval ((30*time.Second): the default Guard). The
// samples are returned sorted.
func WakeLatency(ctx context.Context, db *sql.DB, listen bool, samples int, takeover time.Duration) (_ []time.Duration, err error) {
	if samples < 1 {
		return nil, fmt.Errorf("sqlbench: %d samples", samples)
	}
	table := "idem_bench_" + randHex(6)
	owner, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithTable(table))
	if err != nil {
		return nil, err
	}
	waiter, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithTable(table))
	if err != nil {
		return nil, err
	}
	if err := owner.Migrate(ctx); err != nil {
		return nil, err
	}
	defer func() {
		err = errors.Join(err, owner.Close(), waiter.Close())
		if _, derr := db.ExecContext(context.WithoutCancel(ctx), `DROP TABLE IF EXISTS `+table); derr != nil {
			err = errors.Join(err, derr)
		}
	}()
	var waiterStore storekit.Store = waiter
	if listen {
		ws, err := waiter.Listen()
		if err != nil {
			return nil, err
		}
		waiterStore = ws
	}
	return benchkit.WakeLatency(ctx, owner, waiterStore, samples, takeover)
}

// Quantile returns the q quantile (0 <= q < 1) of sorted durations, 0 for
// none: Quantile(d, 0.5) is the median.
func Quantile(sorted []time.Duration, q float64) time.Duration { return benchkit.Quantile(sorted, q) }

// WakeTable prints to w the median and 90th percentile Wait wake-up on
// PostgreSQL at dsn, with LISTEN/NOTIFY and with the poll, from samples
// calls each under default Guards (WakeLatency).
func WakeTable(ctx context.Context, w io.Writer, dsn string, samples int) error {
	db, err := Open(dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	fmt.Fprintf(w, "\nPostgreSQL Wait wake-up after the owner returns (%d samples each, waiter waiting 100-300ms)\n", samples)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "waiter\tmedian ms\tp90 ms\t")
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	var med [2]time.Duration
	for i, listen := range []bool{true, false} {
		lat, err := WakeLatency(ctx, db, listen, samples, (30 * time.Second))
		if err != nil {
			return err
		}
		name := "LISTEN/NOTIFY"
		if !listen {
			name = "poll"
		}
		med[i] = Quantile(lat, 0.5)
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t\n", name, ms(med[i]), ms(Quantile(lat, 0.9)))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if med[0] > 0 {
		fmt.Fprintf(w, "poll median / LISTEN median = %.0fx\n", float64(med[1])/float64(med[0]))
	}
	return nil
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
