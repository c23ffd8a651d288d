package sqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/sqlstore"
)

// TestHotKeyTransientErrors: 12 clients on one key, through the Guard, with
// a short heartbeat so heartbeats, claims and completes contend for the
// row's locks (MariaDB answers some with deadlock 1213 or lock wait 1205):
// fn runs exactly once per round and no call fails.
func TestHotKeyTransientErrors(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		e := newEnv(t, d)
		ctx := ctxT(t)
		const clients, rounds = 12, 5
		for r := range rounds {
			var runs atomic.Int32
			var wg sync.WaitGroup
			errs := make(chan error, clients)
			for range clients {
				wg.Add(1)
				go func() {
					defer wg.Done()
					g, err := idem.New[int](e.store, idem.OnDuplicate(idem.Wait), idem.WithHeartbeat(5*time.Millisecond),
						idem.WithTakeoverAfter(2*time.Second))
					if err != nil {
						errs <- err
						return
					}
					_, err = g.Do(ctx, "hot-"+string(rune('a'+r)), func(ctx context.Context) (int, error) {
						runs.Add(1)
						time.Sleep(30 * time.Millisecond)
						return r, nil
					})
					if err != nil {
						errs <- err
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Errorf("round %d: %v", r, err)
			}
			if n := runs.Load(); n != 1 {
				t.Errorf("round %d: fn ran %d times", r, n)
			}
		}
	})
}

func TestTransientClassification(t *testing.T) {
	for _, c := range []struct {
		err  error
		want bool
	}{
		{&mysql.MySQLError{Number: 1213}, true},
		{&mysql.MySQLError{Number: 1205}, true},
		{&mysql.MySQLError{Number: 1062}, false},
		{fmt.Errorf("wrapped: %w", &pgconn.PgError{Code: "40P01"}), true},
		{&pgconn.PgError{Code: "40001"}, true},
		{&pgconn.PgError{Code: "22001"}, false},
		{errors.New("other"), false},
	} {
		if got := sqlstore.Transient(c.err); got != c.want {
			t.Errorf("transient(%v) = %v, want %v", c.err, got, c.want)
		}
	}
}
