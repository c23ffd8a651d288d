package sqlstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/sqlstore"
)

// TestMalformedRowsAreCorrupt: a row the Go validation calls corrupt is
// reported as corrupt by every dialect and every claim path, never taken
// over and never an out-of-range database error: a stale claim whose
// takeover_ms is negative (PostgreSQL's claim took it over and fn ran),
// and an expired row or a stale claim whose attempt_count is the largest
// bigint (the claim's attempt_count + 1 failed with "bigint out of
// range").
func TestMalformedRowsAreCorrupt(t *testing.T) {
	for _, d := range []sqlstore.Dialect{sqlstore.Postgres, sqlstore.MySQL, sqlstore.SQLite} {
		paths := []string{"default"}
		if d == sqlstore.MySQL {
			paths = []string{"returning", "procedure", "two-statements"}
		}
		for _, path := range paths {
			t.Run(d.String()+"/"+path, func(t *testing.T) {
				e := newEnv(t, d, sqlstore.WithoutCleanup())
				switch path {
				case "returning":
					sqlstore.SetReturning(e.store, true)
				case "procedure":
					sqlstore.SetReturning(e.store, false)
					sqlstore.SetProcedure(e.store, true)
				case "two-statements":
					sqlstore.SetReturning(e.store, false)
					sqlstore.SetProcedure(e.store, false)
				}
				g, err := idem.New[int](e.store, idem.WithTakeoverAfter(20*time.Millisecond), idem.WithHeartbeat(5*time.Millisecond))
				if err != nil {
					t.Fatal(err)
				}
				ctx := context.Background()
				for _, tc := range []struct{ name, set string }{
					{"negative takeover_ms on a stale claim", "takeover_ms = -1, heartbeat_at = 0"},
					{"largest attempt on an expired row", "attempt_count = 9223372036854775807, expires_at = 1"},
					{"largest attempt on a stale claim", "attempt_count = 9223372036854775807, heartbeat_at = 0"},
					{"largest attempt on a completed row", "attempt_count = 9223372036854775807, status = 'completed', completed_at = 1, result = NULL"},
				} {
					key := tc.name
					sk, err := guardinfo.StorageKey(g, key)
					if err != nil {
						t.Fatal(err)
					}
					if _, err := e.store.Claim(ctx, storekit.ClaimRequest{Key: sk, Nonce: "owner", LeaseTTL: time.Hour, TakeoverAfter: time.Hour}); err != nil {
						t.Fatal(err)
					}
					corrupt(t, e, sk, tc.set)
					ran := false
					_, err = g.Do(ctx, key, func(context.Context) (int, error) { ran = true; return 1, nil })
					var cre *storekit.CorruptRecordError
					if !errors.Is(err, storekit.ErrCorruptRecord) || !errors.As(err, &cre) {
						t.Errorf("%s: Do: %v, want a *storekit.CorruptRecordError", tc.name, err)
					}
					if ran {
						t.Errorf("%s: fn ran", tc.name)
					}
					if _, err := e.store.Get(ctx, sk); !errors.Is(err, storekit.ErrCorruptRecord) {
						t.Errorf("%s: Get: %v, want ErrCorruptRecord", tc.name, err)
					}
				}
			})
		}
	}
}
