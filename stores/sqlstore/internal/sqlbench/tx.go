package sqlbench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/sqlstore"
)

// RoundTrips counts request/response exchanges on the wire of the
// connections Dial makes: a write that follows a read (or is a
// connection's first) starts one. Its zero value is ready to use.
type RoundTrips struct{ n atomic.Int64 }

// Load returns the round trips counted so far.
func (r *RoundTrips) Load() int64 { return r.n.Load() }

// Dial dials like a net.Dialer and counts the connection's round trips
// (a DialFunc for pgx and the MySQL driver).
func (r *RoundTrips) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &countingConn{Conn: c, rt: r}, nil
}

type countingConn struct {
	net.Conn
	rt      *RoundTrips
	writing atomic.Bool
}

func (c *countingConn) Write(b []byte) (int, error) {
	if !c.writing.Swap(true) {
		c.rt.n.Add(1)
	}
	return c.Conn.Write(b)
}

func (c *countingConn) Read(b []byte) (int, error) {
	c.writing.Store(false)
	return c.Conn.Read(b)
}

// txBench is what the DoTx and StepTx measurements share: a pool of one
// PostgreSQL connection whose round trips are counted, a store on a fresh
// table, a side table the measured transactions insert into, and a Guard.
type txBench struct {
	rt     *RoundTrips
	db     *sql.DB
	store  *sqlstore.Store
	g      *idem.Guard[int64]
	table  string
	side   string
	insert string // the INSERT of one row into side
	prefix string // of the keys of one measurement
}

// openTxBench makes the tables (named from name) and the Guard of a
// measurement on PostgreSQL at dsn. close drops them.
func openTxBench(ctx context.Context, dsn, name string) (_ *txBench, err error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, err
	}
	b := &txBench{rt: &RoundTrips{}, prefix: randHex(4) + "-"}
	cfg.DialFunc = b.rt.Dial
	b.db = stdlib.OpenDB(*cfg)
	b.db.SetMaxOpenConns(1)
	b.table, b.side = "idem_bench_"+name+"_"+randHex(6), "idem_bench_"+name+"_side_"+randHex(6)
	b.insert = `INSERT INTO ` + b.side + ` (k, v) VALUES ($1, $2)`
	if b.store, err = sqlstore.New(b.db, sqlstore.Postgres, sqlstore.WithTable(b.table)); err != nil {
		_ = b.db.Close()
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, b.close(ctx))
		}
	}()
	if err := b.store.Migrate(ctx); err != nil {
		return nil, err
	}
	if _, err := b.db.ExecContext(ctx, `CREATE TABLE `+b.side+` (k TEXT NOT NULL, v BIGINT NOT NULL)`); err != nil {
		return nil, err
	}
	if b.g, err = idem.New[int64](b.store); err != nil {
		return nil, err
	}
	return b, nil
}

// close closes the store, drops both tables and closes the pool.
func (b *txBench) close(ctx context.Context) error {
	bg := context.WithoutCancel(ctx)
	_ = b.store.Close()
	_, e1 := b.db.ExecContext(bg, `DROP TABLE IF EXISTS `+b.table)
	_, e2 := b.db.ExecContext(bg, `DROP TABLE IF EXISTS `+b.side)
	return errors.Join(e1, e2, b.db.Close())
}

// plain inserts the row of key k in a plain transaction: BEGIN, INSERT,
// COMMIT.
func (b *txBench) plain(ctx context.Context, k string) error {
	tx, err := b.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx, b.insert, k, 1); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// measure adds the wall time and the round trips of f to c.
func (b *txBench) measure(c *Cost, f func() error) error {
	before, start := b.rt.Load(), time.Now()
	err := f()
	c.Ns += float64(time.Since(start).Nanoseconds())
	c.Trips += float64(b.rt.Load() - before)
	return err
}

// run runs each of the fs on the keys name(0) to name(calls-1), the first
// 10 of them warming up (statements prepared), and returns the cost per
// call of each f, measured over the calls after the warm-up.
func (b *txBench) run(calls int, name func(int) string, fs ...func(string) error) ([]Cost, error) {
	costs := make([]Cost, len(fs))
	for i := range 10 + calls {
		k := name(i)
		for j, f := range fs {
			c := &Cost{}
			if i >= 10 {
				c = &costs[j]
			}
			if err := b.measure(c, func() error { return f(k) }); err != nil {
				return nil, err
			}
		}
	}
	for j := range costs {
		costs[j] = costs[j].per(calls)
	}
	return costs, nil
}

// Cost is the wall time and the round trips on the wire of a call or a
// step, on average.
type Cost struct {
	Ns, Trips float64
}

func (c Cost) per(n int) Cost { return Cost{c.Ns / float64(n), c.Trips / float64(n)} }

// costRow is a row of a table of costs.
type costRow struct {
	name string
	c    Cost
}

// printCosts prints to w the title and a table of the rows' milliseconds
// and round trips per unit ("call", "step").
func printCosts(w io.Writer, title, unit string, rows ...costRow) error {
	fmt.Fprintf(w, "\n%s\n", title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "%s\tms/%s\tround trips/%s\t\n", unit, unit, unit)
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%.2f\t%.2f\t\n", r.name, r.c.Ns/1e6, r.c.Trips)
	}
	return tw.Flush()
}

// TxCost is what a fresh sqlstore.DoTx whose fn inserts one row costs on
// PostgreSQL, next to the same INSERT in a plain transaction, and what a
// replay of it costs: per call, one goroutine, one connection, statements
// prepared.
type TxCost struct {
	Plain, DoTx, Replay Cost
}

// MeasureTx measures TxCost over calls calls each, on fresh tables
// (created here, dropped at the end) of the PostgreSQL database at dsn.
func MeasureTx(ctx context.Context, dsn string, calls int) (_ TxCost, err error) {
	if calls < 1 {
		return TxCost{}, fmt.Errorf("sqlbench: %d calls", calls)
	}
	b, err := openTxBench(ctx, dsn, "tx")
	if err != nil {
		return TxCost{}, err
	}
	defer func() { err = errors.Join(err, b.close(ctx)) }()
	doTx := func(k string) error {
		_, err := sqlstore.DoTx(ctx, b.g, k, func(ctx context.Context, tx *sql.Tx) (int64, error) {
			_, err := tx.ExecContext(ctx, b.insert, k, 1)
			return 1, err
		})
		return err
	}
	plain := func(k string) error { return b.plain(ctx, "p"+k) }
	key := func(i int) string { return b.prefix + strconv.Itoa(i) }
	// The fresh calls first, then their replays: the same keys again.
	fresh, err := b.run(calls, key, plain, doTx)
	if err != nil {
		return TxCost{}, err
	}
	replay, err := b.run(calls, key, doTx)
	if err != nil {
		return TxCost{}, err
	}
	return TxCost{Plain: fresh[0], DoTx: fresh[1], Replay: replay[0]}, nil
}

// TxTable prints MeasureTx on PostgreSQL at dsn to w.
func TxTable(ctx context.Context, w io.Writer, dsn string, calls int) error {
	c, err := MeasureTx(ctx, dsn, calls)
	if err != nil {
		return err
	}
	if err := printCosts(w, fmt.Sprintf("PostgreSQL DoTx, fn inserting one row (%d calls each, one goroutine, one connection)", calls), "call",
		costRow{"plain transaction (BEGIN, INSERT, COMMIT)", c.Plain},
		costRow{"DoTx fresh (claim + the same + completion)", c.DoTx},
		costRow{"DoTx replay", c.Replay}); err != nil {
		return err
	}
	fmt.Fprintf(w, "DoTx adds %.2f round trips to the plain transaction (the claim, and the completion inside the transaction)\n",
		c.DoTx.Trips-c.Plain.Trips)
	return nil
}

// StepTxCost is what the steps of a call cost on PostgreSQL, per step: one
// goroutine, one connection, statements prepared, the attempt's steps
// epoch already read.
type StepTxCost struct {
	Plain  Cost // BEGIN, INSERT, COMMIT
	Step   Cost // a Step that runs (fn does nothing)
	Run    Cost // a StepTx that runs, fn inserting one row
	Replay Cost // the same StepTx again in the attempt: replayed
}

// MeasureStepTx measures StepTxCost over calls calls, on fresh tables
// (created here, dropped at the end) of the PostgreSQL database at dsn.
func MeasureStepTx(ctx context.Context, dsn string, calls int) (_ StepTxCost, err error) {
	if calls < 1 {
		return StepTxCost{}, fmt.Errorf("sqlbench: %d calls", calls)
	}
	b, err := openTxBench(ctx, dsn, "steps")
	if err != nil {
		return StepTxCost{}, err
	}
	defer func() { err = errors.Join(err, b.close(ctx)) }()
	var steps StepTxCost
	warm := 10
	// call is one guarded call of three steps; the steps of the warm-up
	// calls are measured into a cost that is dropped.
	call := func(k string) error {
		var dropped StepTxCost
		c := &steps
		if warm > 0 {
			warm--
			c = &dropped
		}
		order := func(ctx context.Context, tx *sql.Tx) (int64, error) {
			_, err := tx.ExecContext(ctx, b.insert, k, 1)
			return 1, err
		}
		_, err := b.g.Do(ctx, k, func(ctx context.Context) (int64, error) {
			// The first Step of the attempt also reads its steps epoch:
			// counted in the call, not in the step.
			if _, err := idem.Step(ctx, "epoch", func(context.Context) (int, error) { return 1, nil }); err != nil {
				return 0, err
			}
			if err := b.measure(&c.Step, func() error {
				_, err := idem.Step(ctx, "charge", func(context.Context) (int, error) { return 1, nil })
				return err
			}); err != nil {
				return 0, err
			}
			for _, m := range []*Cost{&c.Run, &c.Replay} {
				if err := b.measure(m, func() error { _, err := sqlstore.StepTx(ctx, "order", order); return err }); err != nil {
					return 0, err
				}
			}
			return 1, nil
		})
		return err
	}
	plain := func(k string) error { return b.plain(ctx, "p"+k) }
	costs, err := b.run(calls, func(i int) string { return b.prefix + strconv.Itoa(i) }, plain, call)
	if err != nil {
		return StepTxCost{}, err
	}
	return StepTxCost{Plain: costs[0], Step: steps.Step.per(calls), Run: steps.Run.per(calls), Replay: steps.Replay.per(calls)}, nil
}

// StepTxTable prints MeasureStepTx on PostgreSQL at dsn to w. It fails if
// a StepTx that runs costs other than 2 round trips more than the plain
// transaction, or a replayed one other than 1.
func StepTxTable(ctx context.Context, w io.Writer, dsn string, calls int) error {
	c, err := MeasureStepTx(ctx, dsn, calls)
	if err != nil {
		return err
	}
	if err := printCosts(w, fmt.Sprintf("PostgreSQL steps of a call (%d calls, one goroutine, one connection; the attempt's steps epoch not counted)", calls), "step",
		costRow{"plain transaction (BEGIN, INSERT, COMMIT)", c.Plain},
		costRow{"Step that runs (claim, complete)", c.Step},
		costRow{"StepTx that runs (claim + the same transaction + completion inside)", c.Run},
		costRow{"StepTx replayed", c.Replay}); err != nil {
		return err
	}
	fmt.Fprintf(w, "StepTx adds %.2f round trips to the plain transaction (its claim, and its record inside the transaction); replayed, %.2f\n",
		c.Run.Trips-c.Plain.Trips, c.Replay.Trips)
	if c.Run.Trips-c.Plain.Trips != 2 || c.Replay.Trips != 1 {
		return fmt.Errorf("StepTx cost %.2f round trips more than a plain transaction, replayed %.2f: want 2 and 1", c.Run.Trips-c.Plain.Trips, c.Replay.Trips)
	}
	return nil
}
