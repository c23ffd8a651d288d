package sqlstore_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/stores/sqlstore"
)

// soak skips t unless IDEM_SOAK=1: these measurements take minutes.
func soak(t *testing.T) {
	t.Helper()
	if os.Getenv("IDEM_SOAK") != "1" {
		t.Skip("set IDEM_SOAK=1 to run the clean-up measurements")
	}
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// tableBytes is the table's size on disk with its indexes (PostgreSQL:
// pg_total_relation_size; MySQL: InnoDB's data and index length after
// ANALYZE TABLE).
func tableBytes(t testing.TB, d sqlstore.Dialect, db *sql.DB, table string) int64 {
	t.Helper()
	var n int64
	if d == sqlstore.Postgres {
		require.NoError(t, db.QueryRow(`SELECT pg_total_relation_size($1)`, table).Scan(&n))
		return n
	}
	_, err := db.Exec(`ANALYZE TABLE ` + table)
	require.NoError(t, err)
	require.NoError(t, db.QueryRow(`SELECT data_length + index_length FROM information_schema.tables
WHERE table_schema = DATABASE() AND table_name = ?`, table).Scan(&n))
	return n
}

// walState is PostgreSQL's WAL position and the checkpoints it has begun
// (timed and requested); zero on MySQL.
type walState struct{ bytes, checkpoints int64 }

func walCheckpoints(t testing.TB, d sqlstore.Dialect, db *sql.DB) walState {
	t.Helper()
	var w walState
	if d != sqlstore.Postgres {
		return w
	}
	require.NoError(t, db.QueryRow(`SELECT pg_current_wal_lsn() - '0/0', checkpoints_timed + checkpoints_req FROM pg_stat_bgwriter`).Scan(&w.bytes, &w.checkpoints))
	return w
}

func (w walState) since(before walState) walState {
	return walState{w.bytes - before.bytes, w.checkpoints - before.checkpoints}
}

// rowLockWaits returns MySQL's Innodb_row_lock_waits and
// Innodb_row_lock_time_max (server-wide counters); nil on PostgreSQL.
func rowLockWaits(t testing.TB, d sqlstore.Dialect, db *sql.DB) []int64 {
	t.Helper()
	if d != sqlstore.MySQL {
		return nil
	}
	out := make([]int64, 2)
	for i, name := range []string{"Innodb_row_lock_waits", "Innodb_row_lock_time_max"} {
		var k string
		require.NoError(t, db.QueryRow(`SHOW GLOBAL STATUS LIKE '`+name+`'`).Scan(&k, &out[i]))
	}
	return out
}

// TestSoakPurgeMillion removes IDEM_SOAK_ROWS (default 1M) expired rows,
// once with the single DELETE Purge was before batches and once with
// Purge, each on a fresh table beside 100 completed rows that expire
// after the probe's claims, while a probe of fresh claims and replays
// runs; then the probe runs for an equal window (at most
// IDEM_SOAK_QUIET seconds, default 60) without removal. It logs, per
// dialect and way: removal time, the probe's p50/p99/worst during removal
// and in the quiet window, and the table's size before and after.
// IDEM_SOAK_DIALECT and IDEM_SOAK_WAY pick one; IDEM_SOAK_BATCH and
// IDEM_SOAK_PAUSE set Purge's batch size and rest (SetPurgeBatch,
// SetPurgePause).
//
//	IDEM_SOAK=1 go test -run TestSoakPurgeMillion -v -timeout 60m ./stores/sqlstore/
func TestSoakPurgeMillion(t *testing.T) {
	soak(t)
	rows := envInt("IDEM_SOAK_ROWS", 1_000_000)
	quietMax := time.Duration(envInt("IDEM_SOAK_QUIET", 60)) * time.Second
	for _, d := range dialects {
		if only := os.Getenv("IDEM_SOAK_DIALECT"); only != "" && only != d.String() {
			continue
		}
		for _, way := range []string{"single DELETE", "Purge"} {
			if only := os.Getenv("IDEM_SOAK_WAY"); only != "" && only != way {
				continue
			}
			t.Run(d.String()+"/"+way, func(t *testing.T) {
				e := newEnv(t, d, sqlstore.WithoutCleanup(), sqlstore.WithRetention(0))
				if n := envInt("IDEM_SOAK_BATCH", 0); n > 0 {
					sqlstore.SetPurgeBatch(e.store, n)
				}
				if v := os.Getenv("IDEM_SOAK_PAUSE"); v != "" {
					f, err := strconv.ParseFloat(v, 64)
					require.NoError(t, err)
					sqlstore.SetPurgePause(e.store, f)
				}
				start := time.Now()
				fillRows(t, d, e.db, e.table, "idem:old", rows, -time.Hour)
				fillRows(t, d, e.db, e.table, "idem:live", 100, 24*time.Hour)
				if d == sqlstore.Postgres {
					_, err := e.db.Exec(`VACUUM ANALYZE ` + e.table)
					require.NoError(t, err)
				}
				t.Logf("filled %d rows in %v", rows, time.Since(start).Round(time.Millisecond))
				ctx := context.Background()
				replay := claimReq(storageKey())
				_, err := e.store.Claim(ctx, replay)
				require.NoError(t, err)
				require.NoError(t, e.store.Complete(ctx, replay.Key, replay.Nonce, storekit.Completion{Status: storekit.StatusCompleted, TTL: 24 * time.Hour}))
				before := tableBytes(t, d, e.db, e.table)
				remove := func() {
					n, err := e.store.Purge(ctx)
					require.NoError(t, err)
					require.Equal(t, rows, n)
				}
				if way == "single DELETE" {
					remove = func() {
						res, err := e.db.ExecContext(ctx, oldPurge(d, e.table))
						require.NoError(t, err)
						n, _ := res.RowsAffected()
						require.EqualValues(t, rows, n)
					}
				}
				waits := rowLockWaits(t, d, e.db)
				wal := walCheckpoints(t, d, e.db)
				during, took := window(t, e.store, replay.Key, 0, remove)
				wal = walCheckpoints(t, d, e.db).since(wal)
				if d == sqlstore.MySQL {
					w := rowLockWaits(t, d, e.db)
					t.Logf("  InnoDB row lock waits during removal (whole server): %d, longest wait ever %d ms", w[0]-waits[0], w[1])
				}
				after := tableBytes(t, d, e.db, e.table)
				qwal := walCheckpoints(t, d, e.db)
				quiet, qtook := window(t, e.store, replay.Key, min(took, quietMax), nil)
				qwal = walCheckpoints(t, d, e.db).since(qwal)
				if d == sqlstore.Postgres {
					t.Logf("  WAL written: %d MB during removal (%d checkpoints begun), %d MB in the quiet window (%d checkpoints)",
						wal.bytes>>20, wal.checkpoints, qwal.bytes>>20, qwal.checkpoints)
				}
				t.Logf("%s %s: %d rows removed in %v; table %d MB before, %d MB after", d, way, rows,
					took.Round(time.Millisecond), before>>20, after>>20)
				t.Logf("  during removal: %d calls, p50 %v p99 %v worst %v", len(during),
					pct(during, .5).Round(10*time.Microsecond), pct(during, .99).Round(10*time.Microsecond), pct(during, 1).Round(10*time.Microsecond))
				t.Logf("  quiet %v:     %d calls, p50 %v p99 %v worst %v", qtook.Round(time.Second), len(quiet),
					pct(quiet, .5).Round(10*time.Microsecond), pct(quiet, .99).Round(10*time.Microsecond), pct(quiet, 1).Round(10*time.Microsecond))
				t.Logf("  worst - quiet worst = %v (target <= 100ms); p99 / quiet p99 = %.2f (target <= 2)",
					(pct(during, 1) - pct(quiet, 1)).Round(time.Millisecond), float64(pct(during, .99))/float64(pct(quiet, .99)))
			})
		}
	}
}

// TestSoakTablePlateau runs a steady load of fresh keys whose records
// expire after IDEM_SOAK_TTL_MS (default 2000) for IDEM_SOAK_SECONDS
// (default 240) with the store's own clean-up every second (retention
// 0), and logs every 10 s the rows held, the table's size and the claim
// latency: the rows plateau at about rate × (TTL + interval) and the
// table stops growing once autovacuum (PostgreSQL) or InnoDB's purge has
// made the deleted rows' room reusable. With IDEM_SOAK_VACUUM=n, a
// PostgreSQL server whose autovacuum is off gets a VACUUM of the table
// every n seconds in its stead.
func TestSoakTablePlateau(t *testing.T) {
	soak(t)
	ttl := time.Duration(envInt("IDEM_SOAK_TTL_MS", 2000)) * time.Millisecond
	dur := time.Duration(envInt("IDEM_SOAK_SECONDS", 240)) * time.Second
	workers := envInt("IDEM_SOAK_WORKERS", 4)
	for _, d := range dialects {
		if only := os.Getenv("IDEM_SOAK_DIALECT"); only != "" && only != d.String() {
			continue
		}
		t.Run(d.String(), func(t *testing.T) {
			e := newEnv(t, d, sqlstore.WithCleanup(time.Second), sqlstore.WithRetention(0))
			ctx := context.Background()
			var mu sync.Mutex
			var lat []time.Duration
			var calls atomic.Int64
			stop := make(chan struct{})
			var wg sync.WaitGroup
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						req := claimReq(storageKey())
						start := time.Now()
						_, err := e.store.Claim(ctx, req)
						if err == nil {
							err = e.store.Complete(ctx, req.Key, req.Nonce, storekit.Completion{Status: storekit.StatusCompleted, TTL: ttl, Result: []byte(fmt.Sprintf("%0200d", 0))})
						}
						if err != nil {
							t.Errorf("load: %v", err)
							return
						}
						mu.Lock()
						lat = append(lat, time.Since(start))
						mu.Unlock()
						calls.Add(1)
					}
				}()
			}
			if d == sqlstore.Postgres {
				vacuumLikeAutovacuum(t, e, stop, &wg)
			}
			start := time.Now()
			for time.Since(start) < dur {
				time.Sleep(10 * time.Second)
				mu.Lock()
				l := lat
				lat = nil
				mu.Unlock()
				sortDurations(l)
				t.Logf("%4.0fs  calls %7d  rows %7d  table %6.1f MB  claim+complete p50 %v p99 %v",
					time.Since(start).Seconds(), calls.Load(), countRows(t, e.db, e.table),
					float64(tableBytes(t, d, e.db, e.table))/(1<<20), pct(l, .5).Round(10*time.Microsecond), pct(l, .99).Round(10*time.Microsecond))
			}
			close(stop)
			wg.Wait()
		})
	}
}

// vacuumLikeAutovacuum logs whether the PostgreSQL server runs
// autovacuum; with IDEM_SOAK_VACUUM=n, a server with autovacuum off (a
// test server) gets what autovacuum would do: a VACUUM of the table about
// every n seconds, from a goroutine in wg that ends when stop closes.
func vacuumLikeAutovacuum(t *testing.T, e *env, stop <-chan struct{}, wg *sync.WaitGroup) {
	var av string
	require.NoError(t, e.db.QueryRow(`SHOW autovacuum`).Scan(&av))
	t.Logf("server's autovacuum: %s", av)
	every := envInt("IDEM_SOAK_VACUUM", 0)
	if every <= 0 {
		return
	}
	t.Logf("VACUUM every %ds", every)
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(time.Duration(every) * time.Second)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
				if _, err := e.db.Exec(`VACUUM ` + e.table); err != nil {
					t.Errorf("vacuum: %v", err)
				}
			}
		}
	}()
}

func sortDurations(l []time.Duration) { slices.Sort(l) }
