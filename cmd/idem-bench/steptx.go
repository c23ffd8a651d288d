package main

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/sqlstore"
	"github.com/idem-go/idem/stores/sqlstore/sqlbench"
)

// stepTxCost is what the steps of a call cost on PostgreSQL, per step:
// wall time and round trips on the wire, one goroutine, one connection,
// statements prepared, the attempt's steps epoch already read.
type stepTxCost struct {
	plainNs, plainTrips   float64 // BEGIN, INSERT, COMMIT
	stepNs, stepTrips     float64 // a Step that runs (fn does nothing)
	runNs, runTrips       float64 // a StepTx that runs, fn inserting one row
	replayNs, replayTrips float64 // the same StepTx again in the attempt: replayed
}

// measureStepTx measures stepTxCost over calls calls, on fresh tables of
// the PostgreSQL database at dsn (dropped at the end).
func measureStepTx(ctx context.Context, dsn string, calls int) (_ stepTxCost, err error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return stepTxCost{}, err
	}
	rt := &sqlbench.RoundTrips{}
	cfg.DialFunc = rt.Dial
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	db.SetMaxOpenConns(1)
	suffix := make([]byte, 6)
	_, _ = rand.Read(suffix)
	table, side := "idem_bench_steps_"+hex.EncodeToString(suffix), "idem_bench_steps_side_"+hex.EncodeToString(suffix)
	s, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithTable(table))
	if err != nil {
		return stepTxCost{}, err
	}
	defer func() {
		bg := context.WithoutCancel(ctx)
		_ = s.Close()
		_, e1 := db.ExecContext(bg, `DROP TABLE IF EXISTS `+table)
		_, e2 := db.ExecContext(bg, `DROP TABLE IF EXISTS `+side)
		err = errors.Join(err, e1, e2)
	}()
	if err := s.Migrate(ctx); err != nil {
		return stepTxCost{}, err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+side+` (k TEXT NOT NULL, v BIGINT NOT NULL)`); err != nil {
		return stepTxCost{}, err
	}
	g, err := idem.New[int64](s)
	if err != nil {
		return stepTxCost{}, err
	}
	insert := `INSERT INTO ` + side + ` (k, v) VALUES ($1, $2)`
	var c stepTxCost
	// measure adds the time and round trips of f to ns and trips.
	measure := func(ns, trips *float64, f func() error) error {
		before, start := rt.Load(), time.Now()
		err := f()
		*ns += float64(time.Since(start).Nanoseconds())
		*trips += float64(rt.Load() - before)
		return err
	}
	call := func(k string, count bool) error {
		_, err := g.Do(ctx, k, func(ctx context.Context) (int64, error) {
			var dummy float64
			ns, trips := &dummy, &dummy
			if count {
				ns, trips = &c.stepNs, &c.stepTrips
			}
			// The first Step of the attempt also reads its steps epoch:
			// counted apart (in the call, not the step).
			if _, err := idem.Step(ctx, "epoch", func(context.Context) (int, error) { return 1, nil }); err != nil {
				return 0, err
			}
			if err := measure(ns, trips, func() error {
				_, err := idem.Step(ctx, "charge", func(context.Context) (int, error) { return 1, nil })
				return err
			}); err != nil {
				return 0, err
			}
			order := func(ctx context.Context, tx *sql.Tx) (int64, error) {
				_, err := tx.ExecContext(ctx, insert, k, 1)
				return 1, err
			}
			for _, m := range [][2]*float64{{&c.runNs, &c.runTrips}, {&c.replayNs, &c.replayTrips}} {
				ns, trips := &dummy, &dummy
				if count {
					ns, trips = m[0], m[1]
				}
				if err := measure(ns, trips, func() error { _, err := sqlstore.StepTx(ctx, "order", order); return err }); err != nil {
					return 0, err
				}
			}
			return 1, nil
		})
		return err
	}
	plain := func(k string) error {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, insert, k, 1); err != nil {
			_ = tx.Rollback()
			return err
		}
		return tx.Commit()
	}
	prefix := hex.EncodeToString(suffix[:3]) + "-"
	for i := range 10 { // warm: statements prepared
		if err := call(prefix+"w"+strconv.Itoa(i), false); err != nil {
			return stepTxCost{}, err
		}
		if err := plain(prefix + "pw" + strconv.Itoa(i)); err != nil {
			return stepTxCost{}, err
		}
	}
	for i := range calls {
		if err := measure(&c.plainNs, &c.plainTrips, func() error { return plain(prefix + "p" + strconv.Itoa(i)) }); err != nil {
			return stepTxCost{}, err
		}
		if err := call(prefix+strconv.Itoa(i), true); err != nil {
			return stepTxCost{}, err
		}
	}
	for _, f := range []*float64{&c.plainNs, &c.plainTrips, &c.stepNs, &c.stepTrips, &c.runNs, &c.runTrips, &c.replayNs, &c.replayTrips} {
		*f /= float64(calls)
	}
	return c, nil
}

// stepTxTable prints measureStepTx on PostgreSQL at dsn to w.
func stepTxTable(ctx context.Context, w io.Writer, dsn string, calls int) error {
	c, err := measureStepTx(ctx, dsn, calls)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nPostgreSQL steps of a call (%d calls, one goroutine, one connection; the attempt's steps epoch not counted)\n", calls)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "step\tms/step\tround trips/step\t")
	fmt.Fprintf(tw, "plain transaction (BEGIN, INSERT, COMMIT)\t%.2f\t%.2f\t\n", c.plainNs/1e6, c.plainTrips)
	fmt.Fprintf(tw, "Step that runs (claim, complete)\t%.2f\t%.2f\t\n", c.stepNs/1e6, c.stepTrips)
	fmt.Fprintf(tw, "StepTx that runs (claim + the same transaction + completion inside)\t%.2f\t%.2f\t\n", c.runNs/1e6, c.runTrips)
	fmt.Fprintf(tw, "StepTx replayed\t%.2f\t%.2f\t\n", c.replayNs/1e6, c.replayTrips)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "StepTx adds %.2f round trips to the plain transaction (its claim, and its record inside the transaction); replayed, %.2f\n",
		c.runTrips-c.plainTrips, c.replayTrips)
	if c.runTrips-c.plainTrips != 2 || c.replayTrips != 1 {
		return fmt.Errorf("StepTx cost %.2f round trips more than a plain transaction, replayed %.2f: want 2 and 1", c.runTrips-c.plainTrips, c.replayTrips)
	}
	return nil
}
