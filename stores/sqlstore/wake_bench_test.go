package sqlstore_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/stores/sqlstore"
	"github.com/idem-go/idem/stores/sqlstore/internal/sqlbench"
)

// BenchmarkWaitWakeup measures on PostgreSQL how long after the owner's
// call returns a waiter in another Guard (over its own Store, as another
// process would have) returns (sqlbench.WakeLatency): "listen" wakes it by
// LISTEN/NOTIFY (Store.Listen), "poll" hands the waiter the plain Store, so
// its Guard polls with its capped backoff. Each iteration is one sample;
// the waiter has been waiting 100-300ms when the owner finishes.
// median-wake-ms and p90-wake-ms are the results (ns/op is mostly that
// wait); run with -benchtime=20x or more for a stable median. The
// benchtable program (internal/benchtable) prints the same with 15 samples.
func BenchmarkWaitWakeup(b *testing.B) {
	for _, mode := range []string{"listen", "poll"} {
		b.Run(mode, func(b *testing.B) {
			db := sharedDB(b, sqlstore.Postgres)
			b.ResetTimer()
			lat, err := sqlbench.WakeLatency(context.Background(), db, mode == "listen", b.N, (30 * time.Second))
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
			b.ReportMetric(ms(sqlbench.Quantile(lat, 0.5)), "median-wake-ms")
			b.ReportMetric(ms(sqlbench.Quantile(lat, 0.9)), "p90-wake-ms")
		})
	}
}

// BenchmarkNotifyCost measures what the notification adds to a completion
// on PostgreSQL: the same autocommitted UPDATE of one row, plain and with
// pg_notify in the same statement (as Complete sends it), from one
// goroutine (serial) and from 4 per CPU (parallel) on distinct rows. Every notifying commit takes the server's
// notification queue lock.
func BenchmarkNotifyCost(b *testing.B) {
	e := newEnv(b, sqlstore.Postgres)
	const rows = 256
	keys := make([]string, rows)
	for i := range keys {
		r := claimReq(storageKey())
		if _, err := e.store.Claim(context.Background(), r); err != nil {
			b.Fatal(err)
		}
		keys[i] = r.Key
	}
	upd := `UPDATE ` + e.table + ` SET completed_at = completed_at + 1 WHERE key_hash = $1`
	for _, c := range []struct{ name, q string }{
		{"plain", upd},
		{"notify", `WITH u AS (` + upd + ` RETURNING key_hash) SELECT pg_notify('` + e.store.Channel() + `', key_hash) FROM u`},
	} {
		st, err := e.db.Prepare(c.q)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.Close() })
		b.Run(c.name+"/serial", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				if _, err := st.Exec(keys[i%rows]); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			var next atomicCounter
			b.SetParallelism(4)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := st.Exec(keys[next.add()%rows]); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}

type atomicCounter struct{ n atomic.Int64 }

func (c *atomicCounter) add() int64 { return c.n.Add(1) }
