package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/sqlstore"
)

// heldDB opens a pool for d through a testenv.Proxy.
func heldDB(t *testing.T, d sqlstore.Dialect) (*sql.DB, *testenv.Proxy) {
	t.Helper()
	if d == sqlstore.Postgres {
		cfg, err := pgx.ParseConfig(dsn(t, d))
		require.NoError(t, err)
		p := testenv.NewProxy(t, fmt.Sprintf("%s:%d", cfg.Host, cfg.Port))
		cfg.DialFunc = p.Dial
		db := stdlib.OpenDB(*cfg)
		t.Cleanup(func() { _ = db.Close() })
		return db, p
	}
	cfg, err := mysql.ParseDSN(dsn(t, d))
	require.NoError(t, err)
	p := testenv.NewProxy(t, cfg.Addr)
	cfg.DialFunc = p.Dial
	conn, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	db := sql.OpenDB(conn)
	t.Cleanup(func() { _ = db.Close() })
	return db, p
}

// TestHeldCompletionNotRecordedOnlyWhenTrue: the completion request is
// held by the network for the takeover threshold plus 300ms and then
// delivered, after the Guard gave up waiting for it. Whatever the Guard
// answers, it must not be storekit.ErrNotRecorded while the record ends
// completed: a caller told "not recorded" may run the side effect again
// under another key. Before idem fenced off a late completion (a claim
// with a new nonce) before answering, the Guard read the record back in
// progress, answered ErrNotRecorded, and the held completion then landed.
func TestHeldCompletionNotRecordedOnlyWhenTrue(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		const takeover = time.Second
		db, proxy := heldDB(t, d)
		e := newEnvOn(t, d, db, nil)
		g := newGuard[int](t, e.store, idem.WithTakeoverAfter(takeover), idem.WithHeartbeat(takeover/2))
		ctx := ctxT(t)
		if _, err := g.Do(ctx, "warm", func(context.Context) (int, error) { return 0, nil }); err != nil {
			t.Fatal(err) // statements prepared
		}
		var runs atomic.Int32
		v, err := g.Do(ctx, "held", func(context.Context) (int, error) {
			runs.Add(1)
			// The next request, the completion, is held by the network.
			proxy.HoldNext(takeover + 300*time.Millisecond)
			return 7, nil
		})
		returned := time.Now()
		t.Logf("Do: %d, %v", v, err)
		// Let the held request land, then look at the record.
		select {
		case <-proxy.Delivered():
		case <-time.After(30 * time.Second):
			t.Fatal("the completion was held and never delivered")
		}
		t.Logf("held completion delivered %v after Do returned", time.Since(returned))
		time.Sleep(500 * time.Millisecond)
		rec, gerr := e.store.Get(ctx, storageKeyOf(t, e, "held"))
		require.NoError(t, gerr)
		if rec.Status == storekit.StatusCompleted {
			assert.False(t, errors.Is(err, storekit.ErrNotRecorded),
				"told ErrNotRecorded (%v) while the record ended completed", err)
		}
		if err == nil {
			assert.Equal(t, 7, v)
			assert.Equal(t, storekit.StatusCompleted, rec.Status)
		}
		v2, err2 := g.Do(ctx, "held", func(context.Context) (int, error) { runs.Add(1); return 8, nil })
		if rec.Status == storekit.StatusCompleted {
			assert.NoError(t, err2)
			assert.Equal(t, 7, v2)
			assert.EqualValues(t, 1, runs.Load())
		}
	})
}

// storageKeyOf finds the storage key of the only row besides "warm"'s:
// the table holds two rows, and the test knows which call it made last.
func storageKeyOf(t *testing.T, e *env, _ string) string {
	t.Helper()
	var key string
	require.NoError(t, e.db.QueryRow("SELECT key_hash FROM "+e.table+" ORDER BY started_at DESC LIMIT 1").Scan(&key))
	return key
}
