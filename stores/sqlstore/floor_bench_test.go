package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/sqlstore"
)

// BenchmarkDoTxFloor measures, on PostgreSQL and MySQL/MariaDB, what a
// DoTx whose fn inserts one row costs against the same INSERT in a plain
// transaction, and on PostgreSQL what two one-commit protocols built here
// from bare statements cost (the happy path only: a fresh key, no failure
// handling), which shows the floor:
//
//   - plain: BEGIN, the INSERT, COMMIT (database/sql).
//   - plain+record: the same with a second INSERT, of the key's record
//     (what any one-commit protocol adds to the transaction's writes).
//   - dotx: sqlstore.DoTx: the claim read with the key's lock, BEGIN, the
//     INSERT, the record with its outcome, COMMIT (one commit).
//   - dotx-claim-commit: sqlstore.DoTx on a store WithClaimCommit: the
//     claim (its own commit), BEGIN, the INSERT, the completion, COMMIT.
//   - one-sql: what dotx does, bare, over database/sql: a read of the key
//     that also takes a session advisory lock when the key has no record
//     (a replay stops there), BEGIN, the INSERT, the record's INSERT with
//     its outcome (conditioned on no record) and the lock's release,
//     COMMIT.
//   - one-pgx: the same over pgx's own connection, pipelined: the read;
//     BEGIN with fn's first statement; the record's INSERT with COMMIT.
//
// Each round runs every protocol in turn (n calls each, alternating
// rounds); rt/call is the round trips of one call, counted on the wire.
// With callers=16 (the sub-benchmark's name), 16 goroutines run calls at
// once, each on its own key.
func BenchmarkDoTxFloor(b *testing.B) {
	for _, d := range []sqlstore.Dialect{sqlstore.Postgres, sqlstore.MySQL} {
		for _, callers := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/callers=%d", d, callers), func(b *testing.B) { floorRounds(b, d, callers) })
		}
	}
}

// floorRounds is one sub-benchmark of BenchmarkDoTxFloor.
func floorRounds(b *testing.B, d sqlstore.Dialect, callers int) {
	f := newFloor(b, d)
	protos := []string{"plain", "plain+record", "dotx", "dotx-claim-commit"}
	if d == sqlstore.Postgres {
		protos = append(protos, "one-sql", "one-pgx") // the bare protocols are PostgreSQL's statements
	}
	for _, p := range protos { // warm: statements prepared, connections open
		if err := f.run(p, callers, 20); err != nil {
			b.Fatal(p, err)
		}
	}
	rts := map[string]float64{}
	for _, p := range protos {
		before := f.rt.Load()
		if err := f.run(p, 1, 1); err != nil {
			b.Fatal(p, err)
		}
		rts[p] = float64(f.rt.Load() - before)
	}
	per := map[string]time.Duration{}
	b.ResetTimer()
	const rounds = 5
	n := max(b.N/rounds, 1)
	for range rounds {
		for _, p := range protos {
			start := time.Now()
			if err := f.run(p, callers, n); err != nil {
				b.Fatal(p, err)
			}
			per[p] += time.Since(start)
		}
	}
	b.StopTimer()
	for _, p := range protos {
		ns := float64(per[p].Nanoseconds()) / float64(rounds*n)
		b.ReportMetric(ns/1000, p+"-µs/call")
		b.ReportMetric(float64(per["plain"])/float64(per[p]), p+"-throughput/plain")
		b.ReportMetric(rts[p], p+"-rt/call")
	}
}

// floor holds what BenchmarkDoTxFloor's protocols share.
type floor struct {
	db    *sql.DB
	d     sqlstore.Dialect
	rt    interface{ Load() int64 }
	table string // the store's records
	side  string // fn's rows
	dotx  func(ctx context.Context, key string) error
	dotx2 func(ctx context.Context, key string) error // WithClaimCommit
	seq   atomic.Int64
}

func newFloor(b *testing.B, d sqlstore.Dialect) *floor {
	e := newCountedEnv(b, d)
	e.db.SetMaxOpenConns(40)
	e.db.SetMaxIdleConns(40)
	side := sideTable(b, d)
	g := newGuard[int](b, e.store)
	f := &floor{db: e.db, d: d, rt: e.rt, table: e.table, side: side}
	s2, err := sqlstore.New(e.db, d, sqlstore.WithTable(e.table), sqlstore.WithClaimCommit(), sqlstore.WithoutCleanup())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s2.Close() })
	g2 := newGuard[int](b, s2)
	dotx := func(g *idem.Guard[int]) func(ctx context.Context, key string) error {
		return func(ctx context.Context, key string) error {
			_, err := sqlstore.DoTx(ctx, g, key, func(ctx context.Context, tx *sql.Tx) (int, error) {
				return 1, insertSide(ctx, tx, d, side, key)
			})
			return err
		}
	}
	f.dotx, f.dotx2 = dotx(g), dotx(g2)
	return f
}

// run makes n calls of protocol p on fresh keys from each of callers
// goroutines.
func (f *floor) run(p string, callers, n int) error {
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				key := p + "-" + strconv.FormatInt(f.seq.Add(1), 10)
				if err := f.call(ctx, p, key); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// plain is fn's INSERT in a plain transaction, with the INSERT of the
// key's record too when record is set.
func (f *floor) plain(ctx context.Context, key string, record bool) error {
	tx, err := f.db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, ph3(f.d, "INSERT INTO "+f.side+" (k, attempt, pid) VALUES (?, 1, 1)"), key)
	if err == nil && record {
		now := time.Now().UnixMilli()
		_, err = tx.ExecContext(ctx, ph3(f.d, "INSERT INTO "+f.table+" (key_hash, claim_nonce, status, result, started_at, heartbeat_at, completed_at, expires_at) "+
			"VALUES (?, ?, 'completed', ?, ?, ?, ?, ?)"), key, "n"+key, []byte("1"), now, now, now, now+86_400_000)
	}
	if err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}

// call makes one call of protocol p on key.
func (f *floor) call(ctx context.Context, p, key string) error {
	switch p {
	case "plain", "plain+record":
		return f.plain(ctx, key, p == "plain+record")
	case "dotx":
		return f.dotx(ctx, key)
	case "dotx-claim-commit":
		return f.dotx2(ctx, key)
	}
	conn, err := f.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	now := time.Now().UnixMilli()
	read := "SELECT (SELECT status FROM " + f.table + " WHERE key_hash = $1), " +
		"CASE WHEN EXISTS (SELECT 1 FROM " + f.table + " WHERE key_hash = $1) THEN false " +
		"ELSE pg_try_advisory_lock(hashtextextended($1, 0)) END"
	record := "WITH w AS (INSERT INTO " + f.table + " (key_hash, claim_nonce, status, result, started_at, heartbeat_at, completed_at, expires_at) " +
		"VALUES ($1, $2, 'completed', $3, $4, $4, $4, $5) ON CONFLICT (key_hash) DO NOTHING RETURNING 1) " +
		"SELECT EXISTS (SELECT 1 FROM w), pg_advisory_unlock(hashtextextended($1, 0))"
	args := []any{key, "n" + key, []byte("1"), now, now + 86_400_000}
	var status sql.NullString
	var locked bool
	if err := conn.QueryRowContext(ctx, read, key).Scan(&status, &locked); err != nil {
		return err
	}
	if status.Valid || !locked {
		return fmt.Errorf("%s: key %s not fresh", p, key)
	}
	if p == "one-sql" {
		tx, err := conn.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+f.side+" (k, attempt, pid) VALUES ($1, 1, 1)", key); err != nil {
			_ = tx.Rollback()
			return err
		}
		var wrote, unlocked bool
		if err := tx.QueryRowContext(ctx, record, args...).Scan(&wrote, &unlocked); err != nil || !wrote {
			_ = tx.Rollback()
			return fmt.Errorf("record: %v %v", wrote, err)
		}
		return tx.Commit()
	}
	return conn.Raw(func(dc any) error {
		pc := dc.(*stdlib.Conn).Conn()
		first := &pgx.Batch{}
		first.Queue("BEGIN")
		first.Queue("INSERT INTO "+f.side+" (k, attempt, pid) VALUES ($1, 1, 1)", key)
		if err := pc.SendBatch(ctx, first).Close(); err != nil {
			return err
		}
		last := &pgx.Batch{}
		var wrote, unlocked bool
		last.Queue(record, args...).QueryRow(func(r pgx.Row) error { return r.Scan(&wrote, &unlocked) })
		last.Queue("COMMIT")
		if err := pc.SendBatch(ctx, last).Close(); err != nil {
			return err
		}
		if !wrote {
			return fmt.Errorf("record not written")
		}
		return nil
	})
}
