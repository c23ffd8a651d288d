package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/sqlstore"
)

// holdTx starts a DoTx of key on g whose fn inserts its row and then waits
// for release; it returns once fn is running, and a channel with what
// DoTx returned.
func holdTx(t *testing.T, g *idem.Guard[int], d sqlstore.Dialect, side, key string, v int, fail error) (release func(), done <-chan error) {
	t.Helper()
	running, rel, out := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		_, err := sqlstore.DoTx(ctxT(t), g, key, func(ctx context.Context, tx *sql.Tx) (int, error) {
			if err := insertSide(ctx, tx, d, side, key); err != nil {
				return 0, err
			}
			close(running)
			<-rel
			return v, fail
		})
		out <- err
	}()
	select {
	case <-running:
	case err := <-out:
		t.Fatalf("the holding DoTx ended before its fn ran: %v", err)
	}
	return func() { close(rel) }, out
}

// TestDoTxDuplicates: while a DoTx's transaction is open, a duplicate
// under Return is told idem.ErrInProgress and one under Raise an error
// matching idem.ErrDuplicate and idem.ErrInProgress, each without waiting
// for the transaction; a duplicate under Wait waits for it to end and
// then replays its outcome without running fn (it committed) or runs fn
// itself (it rolled back). Each duplicate has a Guard of its own, so it
// asks the store, as a caller in another process does.
func TestDoTxDuplicates(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		e := newEnv(t, d)
		side := sideTable(t, d)
		ctx := ctxT(t)
		owner := newGuard[int](t, e.store)
		ret := newGuard[int](t, e.store)
		raise := newGuard[int](t, e.store, idem.OnDuplicate(idem.Raise))
		wait := newGuard[int](t, e.store, idem.OnDuplicate(idem.Wait))
		var dupRuns atomic.Int32
		dup := func(ctx context.Context, tx *sql.Tx) (int, error) {
			dupRuns.Add(1)
			return 2, insertSide(ctx, tx, d, side, "again")
		}

		release, done := holdTx(t, owner, d, side, "k", 1, nil)
		start := time.Now()
		_, err := sqlstore.DoTx(ctx, ret, "k", dup)
		assert.ErrorIs(t, err, idem.ErrInProgress, "Return")
		_, err = sqlstore.DoTx(ctx, raise, "k", dup)
		assert.ErrorIs(t, err, idem.ErrDuplicate, "Raise")
		assert.ErrorIs(t, err, idem.ErrInProgress, "Raise")
		assert.Less(t, time.Since(start), time.Second, "answered without waiting for the open transaction")
		waited := make(chan error, 1)
		var got int
		go func() {
			var err error
			got, err = sqlstore.DoTx(ctx, wait, "k", dup)
			waited <- err
		}()
		select {
		case err := <-waited:
			t.Fatalf("Wait returned while the transaction was open: %v", err)
		case <-time.After(300 * time.Millisecond):
		}
		release()
		require.NoError(t, <-done)
		require.NoError(t, <-waited)
		assert.Equal(t, 1, got, "Wait replays the committed outcome")
		assert.Zero(t, dupRuns.Load(), "no duplicate ran fn")
		assert.Equal(t, 1, sideRows(t, d, side, "k"))

		// Rolled back: the waiting duplicate runs fn itself, at once.
		release, done = holdTx(t, owner, d, side, "r", 1, errors.New("no"))
		go func() {
			var err error
			got, err = sqlstore.DoTx(ctx, wait, "r", func(ctx context.Context, tx *sql.Tx) (int, error) {
				token, _ := idem.FencingToken(ctx)
				return int(token), insertSide(ctx, tx, d, side, "r")
			})
			waited <- err
		}()
		time.Sleep(200 * time.Millisecond)
		release()
		require.Error(t, <-done)
		require.NoError(t, <-waited)
		assert.Equal(t, 1, got, "attempt 1: the rolled-back claim left nothing")
		assert.Equal(t, 1, sideRows(t, d, side, "r"))
	})
}
