package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/sqlstore"
)

// rawSQL is the work a fresh call and a replay do, written by hand with
// prepared statements on the same table: a fresh call inserts the row and
// updates it with the result; a replay selects it.
type rawSQL struct {
	insert, complete, get *sql.Stmt
}

func prepareRaw(b *testing.B, e *env) *rawSQL {
	b.Helper()
	ph := func(q string) string {
		if e.dialect == sqlstore.MySQL {
			return q
		}
		n := 0
		var sb strings.Builder
		for _, c := range q {
			if c == '?' {
				n++
				sb.WriteString("$" + strconv.Itoa(n))
				continue
			}
			sb.WriteRune(c)
		}
		return sb.String()
	}
	prep := func(q string) *sql.Stmt {
		st, err := e.db.Prepare(ph(q))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.Close() })
		return st
	}
	return &rawSQL{
		insert: prep("INSERT INTO " + e.table + " (tenant, scope, key_hash, claim_nonce, status, attempt_count, " +
			"started_at, heartbeat_at, expires_at) VALUES ('', '', ?, ?, 'in_progress', 1, ?, ?, ?)"),
		complete: prep("UPDATE " + e.table + " SET status = 'completed', result = ?, completed_at = ?, expires_at = ? " +
			"WHERE tenant = '' AND scope = '' AND key_hash = ? AND claim_nonce = ?"),
		get: prep("SELECT result FROM " + e.table + " WHERE tenant = '' AND scope = '' AND key_hash = ?"),
	}
}

func (r *rawSQL) fresh(ctx context.Context, key string) error {
	now := time.Now().UnixMilli()
	nonce := randHex(16)
	if _, err := r.insert.ExecContext(ctx, key, nonce, now, now, now+30_000); err != nil {
		return err
	}
	_, err := r.complete.ExecContext(ctx, []byte("42"), now, now+86_400_000, key, nonce)
	return err
}

func (r *rawSQL) replay(ctx context.Context, key string) error {
	var res []byte
	return r.get.QueryRowContext(ctx, key).Scan(&res)
}

// BenchmarkGuard compares guarded calls with the raw statements doing the
// same work, one goroutine, on each dialect: fresh (claim + complete
// against INSERT + UPDATE) and replay (claim of a completed key against
// SELECT). ns/op is the guarded call; raw-ns/op and guard/raw are reported
// alongside.
func BenchmarkGuard(b *testing.B) {
	for _, d := range dialects {
		for _, kind := range []string{"fresh", "replay"} {
			b.Run(d.String()+"/"+kind, func(b *testing.B) {
				e := newEnv(b, d)
				raw := prepareRaw(b, e)
				g := newGuard[int](b, e.store)
				ctx := context.Background()
				fn := func(context.Context) (int, error) { return 42, nil }
				prefix := randHex(4) + "-"
				var guard, plain func(i int) error
				if kind == "fresh" {
					guard = func(i int) error { _, err := g.Do(ctx, prefix+strconv.Itoa(i), fn); return err }
					plain = func(i int) error { return raw.fresh(ctx, "raw:"+prefix+strconv.Itoa(i)) }
				} else {
					if _, err := g.Do(ctx, "replayed", fn); err != nil {
						b.Fatal(err)
					}
					if err := raw.fresh(ctx, "raw:replayed"); err != nil {
						b.Fatal(err)
					}
					guard = func(int) error { _, err := g.Do(ctx, "replayed", fn); return err }
					plain = func(int) error { return raw.replay(ctx, "raw:replayed") }
				}
				b.ReportAllocs()
				rawNs, guardNs := timeBoth(b, 20, guard, plain)
				b.ReportMetric(rawNs, "raw-ns/op")
				b.ReportMetric(guardNs/rawNs, "guard/raw")
			})
		}
	}
}

// BenchmarkMySQLReplay compares a replay on MariaDB through INSERT ...
// RETURNING and through the claim procedure (one round trip each: what a
// MySQL server gets) with INSERT IGNORE + SELECT (two, where the procedure
// is missing), one goroutine and 16 goroutines on one key.
func BenchmarkMySQLReplay(b *testing.B) {
	for _, name := range []string{"returning", "procedure", "insert-ignore+select"} {
		for _, par := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/goroutines=%d", name, par), func(b *testing.B) {
				e := newEnv(b, sqlstore.MySQL)
				sqlstore.SetReturning(e.store, name == "returning")
				sqlstore.SetProcedure(e.store, name == "procedure")
				g := newGuard[int](b, e.store)
				ctx := context.Background()
				fn := func(context.Context) (int, error) { return 42, nil }
				if _, err := g.Do(ctx, "replayed", fn); err != nil {
					b.Fatal(err)
				}
				b.SetParallelism(par)
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					gg := newGuard[int](b, e.store) // its own Guard: no in-process coalescing
					for pb.Next() {
						if _, err := gg.Do(ctx, "replayed", fn); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	}
}

// BenchmarkDoTx compares a fresh DoTx whose fn inserts one row with the
// same INSERT in a plain transaction, one goroutine, on each dialect.
func BenchmarkDoTx(b *testing.B) {
	for _, d := range dialects {
		b.Run(d.String(), func(b *testing.B) {
			e := newEnv(b, d)
			side := sideTable(b, d)
			g := newGuard[int](b, e.store)
			ctx := context.Background()
			prefix := randHex(4) + "-"
			call := func(i int) error {
				k := prefix + strconv.Itoa(i)
				_, err := sqlstore.DoTx(ctx, g, k, func(ctx context.Context, tx *sql.Tx) (int, error) {
					return 1, insertSide(ctx, tx, d, side, k)
				})
				return err
			}
			plain := func(i int) error {
				tx, err := e.db.BeginTx(ctx, nil)
				if err != nil {
					return err
				}
				if err := insertSide(ctx, tx, d, side, "raw"+strconv.Itoa(i)); err != nil {
					_ = tx.Rollback()
					return err
				}
				return tx.Commit()
			}
			rawNs, txNs := timeBoth(b, 10, call, plain)
			b.ReportMetric(rawNs, "plain-tx-ns/op")
			b.ReportMetric(txNs/rawNs, "dotx/plain")
		})
	}
}

// timeBoth warms call and plain up (prepared statements, connections) with
// warm calls each, then times b.N calls of call (the benchmark's own time)
// and, with the timer stopped, b.N calls of plain; it returns their ns per
// call, plain's first.
func timeBoth(b *testing.B, warm int, call, plain func(i int) error) (plainNs, callNs float64) {
	b.Helper()
	for i := range warm {
		if err := call(-1 - i); err != nil {
			b.Fatal(err)
		}
		if err := plain(-1 - i); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		if err := call(i); err != nil {
			b.Fatal(err)
		}
	}
	callNs = float64(time.Since(start).Nanoseconds()) / float64(b.N)
	b.StopTimer()
	start = time.Now()
	for i := 0; i < b.N; i++ {
		if err := plain(i); err != nil {
			b.Fatal(err)
		}
	}
	return float64(time.Since(start).Nanoseconds()) / float64(b.N), callNs
}

// BenchmarkDoTxCommits compares, at 1 and 16 callers, the throughput of a
// plain transaction that inserts one row, of a fresh DoTx whose fn does the
// same INSERT with its claim committed first (WithClaimCommit: two
// commits), and of the one-commit DoTx, on one pool of 32 connections.
// The three alternate in rounds (plain, two, one; six rounds of 2 s each),
// so that load from elsewhere on the machine falls on all three alike; it
// reports each one's calls per second over all its rounds and the ratios
// to the plain transaction. Run with -benchtime=1x: b.N is not used.
func BenchmarkDoTxCommits(b *testing.B) {
	for _, d := range dialects {
		for _, callers := range []int{1, 16} {
			b.Run(fmt.Sprintf("%s/callers=%d", d, callers), func(b *testing.B) {
				db := openDB(b, d, dsn(b, d), nil)
				db.SetMaxOpenConns(32)
				db.SetMaxIdleConns(32)
				b.Cleanup(func() { _ = db.Close() })
				one := newEnvOn(b, d, db, nil)
				two, err := sqlstore.New(db, d, sqlstore.WithTable(one.table), sqlstore.WithClaimCommit())
				if err != nil {
					b.Fatal(err)
				}
				side := sideTable(b, d)
				ctx := context.Background()
				doTx := func(g *idem.Guard[int]) func(k string) error {
					return func(k string) error {
						_, err := sqlstore.DoTx(ctx, g, k, func(ctx context.Context, tx *sql.Tx) (int, error) {
							return 1, insertSide(ctx, tx, d, side, k)
						})
						return err
					}
				}
				plain := func(k string) error {
					tx, err := db.BeginTx(ctx, nil)
					if err != nil {
						return err
					}
					if err := insertSide(ctx, tx, d, side, k); err != nil {
						_ = tx.Rollback()
						return err
					}
					return tx.Commit()
				}
				kinds := []struct {
					name string
					f    func(k string) error
				}{{"plain", plain}, {"two-commit", doTx(newGuard[int](b, two))}, {"one-commit", doTx(newGuard[int](b, one.store))}}
				calls := make([]int64, len(kinds))
				spent := make([]time.Duration, len(kinds))
				for _, k := range kinds { // warm: connections, prepared statements
					for i := range 2 * callers {
						if err := k.f(fmt.Sprintf("warm-%s-%d", k.name, i)); err != nil {
							b.Fatal(err)
						}
					}
				}
				for round := range 6 {
					for i, k := range kinds {
						n, dt, err := runFor(2*time.Second, callers, func(c, j int) error {
							return k.f(fmt.Sprintf("%s-%d-%d-%d", k.name, round, c, j))
						})
						if err != nil {
							b.Fatal(k.name, err)
						}
						calls[i] += n
						spent[i] += dt
					}
				}
				rate := func(i int) float64 { return float64(calls[i]) / spent[i].Seconds() }
				for i, k := range kinds {
					b.ReportMetric(rate(i), k.name+"-calls/s")
				}
				b.ReportMetric(rate(1)/rate(0), "two/plain")
				b.ReportMetric(rate(2)/rate(0), "one/plain")
			})
		}
	}
}

// runFor runs f from callers goroutines, each calling it again and again
// (f(caller, j) for its j-th call) until d has passed; it returns the
// calls made and the time they took.
func runFor(d time.Duration, callers int, f func(c, j int) error) (int64, time.Duration, error) {
	var (
		n    atomic.Int64
		wg   sync.WaitGroup
		ferr atomic.Value
	)
	start := time.Now()
	deadline := start.Add(d)
	for c := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; time.Now().Before(deadline); j++ {
				if err := f(c, j); err != nil {
					ferr.CompareAndSwap(nil, err)
					return
				}
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	if err, _ := ferr.Load().(error); err != nil {
		return 0, 0, err
	}
	return n.Load(), time.Since(start), nil
}
