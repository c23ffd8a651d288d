package sqlstore_test

import (
	"context"
	"database/sql"
	"strconv"
	"strings"
	"testing"
	"time"

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
				// Warm both paths (prepared statements, connections).
				for i := range 20 {
					if err := guard(-1 - i); err != nil {
						b.Fatal(err)
					}
					if err := plain(-1 - i); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					if err := guard(i); err != nil {
						b.Fatal(err)
					}
				}
				guardNs := float64(time.Since(start).Nanoseconds()) / float64(b.N)
				b.StopTimer()
				start = time.Now()
				for i := 0; i < b.N; i++ {
					if err := plain(i); err != nil {
						b.Fatal(err)
					}
				}
				rawNs := float64(time.Since(start).Nanoseconds()) / float64(b.N)
				b.ReportMetric(rawNs, "raw-ns/op")
				b.ReportMetric(guardNs/rawNs, "guard/raw")
			})
		}
	}
}
