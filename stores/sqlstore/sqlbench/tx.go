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

// TxCost is what a fresh sqlstore.DoTx whose fn inserts one row costs on
// PostgreSQL, next to the same INSERT in a plain transaction: wall time and
// round trips on the wire per call, one goroutine, one connection,
// statements prepared.
type TxCost struct {
	DoTxNs, PlainNs       float64
	DoTxTrips, PlainTrips float64
	ReplayTrips, ReplayNs float64
}

// MeasureTx measures TxCost over calls calls each, on fresh tables
// (created here, dropped at the end) of the PostgreSQL database at dsn.
func MeasureTx(ctx context.Context, dsn string, calls int) (_ TxCost, err error) {
	if calls < 1 {
		return TxCost{}, fmt.Errorf("sqlbench: %d calls", calls)
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return TxCost{}, err
	}
	rt := &RoundTrips{}
	cfg.DialFunc = rt.Dial
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	db.SetMaxOpenConns(1)
	table, side := "idem_bench_"+randHex(6), "idem_bench_side_"+randHex(6)
	s, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithTable(table))
	if err != nil {
		return TxCost{}, err
	}
	defer func() {
		bg := context.WithoutCancel(ctx)
		_ = s.Close()
		_, e1 := db.ExecContext(bg, `DROP TABLE IF EXISTS `+table)
		_, e2 := db.ExecContext(bg, `DROP TABLE IF EXISTS `+side)
		err = errors.Join(err, e1, e2)
	}()
	if err := s.Migrate(ctx); err != nil {
		return TxCost{}, err
	}
	if _, err := db.ExecContext(ctx, `CREATE TABLE `+side+` (k TEXT NOT NULL, v BIGINT NOT NULL)`); err != nil {
		return TxCost{}, err
	}
	g, err := idem.New[int64](s)
	if err != nil {
		return TxCost{}, err
	}
	insert := `INSERT INTO ` + side + ` (k, v) VALUES ($1, $2)`
	prefix := randHex(4) + "-"
	doTx := func(k string) error {
		_, err := sqlstore.DoTx(ctx, g, k, func(ctx context.Context, tx *sql.Tx) (int64, error) {
			_, err := tx.ExecContext(ctx, insert, k, 1)
			return 1, err
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
	run := func(f func(string) error, name func(int) string) (ns, trips float64, err error) {
		before, start := rt.Load(), time.Now()
		for i := range calls {
			if err := f(name(i)); err != nil {
				return 0, 0, err
			}
		}
		return float64(time.Since(start).Nanoseconds()) / float64(calls), float64(rt.Load()-before) / float64(calls), nil
	}
	for i := range 10 { // warm: statements prepared
		if err := doTx(prefix + "w" + strconv.Itoa(i)); err != nil {
			return TxCost{}, err
		}
		if err := plain(prefix + "pw" + strconv.Itoa(i)); err != nil {
			return TxCost{}, err
		}
	}
	var c TxCost
	if c.PlainNs, c.PlainTrips, err = run(plain, func(i int) string { return prefix + "p" + strconv.Itoa(i) }); err != nil {
		return TxCost{}, err
	}
	if c.DoTxNs, c.DoTxTrips, err = run(doTx, func(i int) string { return prefix + strconv.Itoa(i) }); err != nil {
		return TxCost{}, err
	}
	if c.ReplayNs, c.ReplayTrips, err = run(doTx, func(i int) string { return prefix + strconv.Itoa(i) }); err != nil {
		return TxCost{}, err
	}
	return c, nil
}

// TxTable prints MeasureTx on PostgreSQL at dsn to w.
func TxTable(ctx context.Context, w io.Writer, dsn string, calls int) error {
	c, err := MeasureTx(ctx, dsn, calls)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nPostgreSQL DoTx, fn inserting one row (%d calls each, one goroutine, one connection)\n", calls)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "call\tms/call\tround trips/call\t")
	fmt.Fprintf(tw, "plain transaction (BEGIN, INSERT, COMMIT)\t%.2f\t%.2f\t\n", c.PlainNs/1e6, c.PlainTrips)
	fmt.Fprintf(tw, "DoTx fresh (claim + the same + completion)\t%.2f\t%.2f\t\n", c.DoTxNs/1e6, c.DoTxTrips)
	fmt.Fprintf(tw, "DoTx replay\t%.2f\t%.2f\t\n", c.ReplayNs/1e6, c.ReplayTrips)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(w, "DoTx adds %.2f round trips to the plain transaction (the claim, and the completion inside the transaction)\n",
		c.DoTxTrips-c.PlainTrips)
	return nil
}
