package sqlstore_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/storekit"
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

// txOneCommitChild is a child of TestDoTxOneCommitKills: a DoTx of "k"
// whose fn inserts its row, stopped at one point, which it prints:
// "completed" (precommit: between the completion and the COMMIT),
// "committed" (after the commit), "inserted" (stopped: inside fn, which
// then returns after 3 s, or once the process is continued).
func txOneCommitChild(t *testing.T, role string, s *sqlstore.Store, d sqlstore.Dialect, side string) {
	if role == "precommit" {
		sqlstore.SetBeforeCommit(func() {
			fmt.Println("completed")
			time.Sleep(time.Hour)
		})
	}
	g := newGuard[int](t, s, idem.WithTakeoverAfter(time.Second))
	_, err := sqlstore.DoTx(context.Background(), g, "k", func(ctx context.Context, tx *sql.Tx) (int, error) {
		if err := insertSide(ctx, tx, d, side, "k"); err != nil {
			return 0, err
		}
		if role == "stopped" {
			fmt.Println("inserted")
			time.Sleep(3 * time.Second)
		}
		return os.Getpid(), nil
	})
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	if role == "committed" {
		fmt.Println("committed")
		time.Sleep(time.Hour)
	}
	os.Exit(0)
}

// waitLine reads out until line, logging what comes before it.
func waitLine(t *testing.T, out io.Reader, line string) {
	t.Helper()
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if sc.Text() == line {
			return
		}
		t.Log("child:", sc.Text())
	}
	t.Fatalf("the child ended before %q", line)
}

// TestDoTxOneCommitKills: a DoTx owner process is SIGKILLed inside fn
// (after its insert), between its completion and its COMMIT, or after
// its commit; a caller with a one-minute takeover threshold then calls
// DoTx on the key. Killed before the commit, the owner left nothing: the
// caller runs fn at once, as attempt 1. Killed after it, the caller
// replays its outcome without running fn. Either way the side table
// holds one row. Then an owner is SIGSTOPped inside fn: it holds the key
// for as long as it is stopped (its session is alive): a Return caller is
// told ErrInProgress, a Wait caller waits until its context ends; once
// the owner is continued and commits, the Wait caller replays its value.
func TestDoTxOneCommitKills(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		for _, point := range []string{"owner", "precommit", "committed"} {
			t.Run(point, func(t *testing.T) {
				txChild(t)
				e := newEnv(t, d)
				side := sideTable(t, d)
				cmd, out := startTxChild(t, d, point, e.table, side)
				waitLine(t, out, map[string]string{"owner": "inserted", "precommit": "completed", "committed": "committed"}[point])
				require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
				_ = cmd.Wait()
				killed := time.Now()
				g := newGuard[int](t, e.store, idem.WithTakeoverAfter(time.Minute), idem.OnDuplicate(idem.Wait))
				ran := false
				v, err := sqlstore.DoTx(ctxT(t), g, "k", func(ctx context.Context, tx *sql.Tx) (int, error) {
					ran = true
					token, _ := idem.FencingToken(ctx)
					return int(token), insertSide(ctx, tx, d, side, "k")
				})
				require.NoError(t, err)
				t.Logf("answered %v after the kill (ran fn: %v)", time.Since(killed).Round(time.Millisecond), ran)
				assert.Less(t, time.Since(killed), 10*time.Second, "not after the takeover threshold")
				if point == "committed" {
					assert.False(t, ran, "the committed outcome is replayed")
					assert.Equal(t, cmd.Process.Pid, v)
				} else {
					assert.True(t, ran)
					assert.Equal(t, 1, v, "attempt 1: the killed owner left no record")
				}
				assert.Equal(t, 1, sideRows(t, d, side, "k"))
			})
		}
		t.Run("stopped", func(t *testing.T) {
			txChild(t)
			e := newEnv(t, d)
			side := sideTable(t, d)
			cmd, out := startTxChild(t, d, "stopped", e.table, side)
			waitLine(t, out, "inserted")
			require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
			time.Sleep(4 * time.Second) // past the child's own sleep: only SIGCONT lets it go on
			_, err := sqlstore.DoTx(ctxT(t), newGuard[int](t, e.store, idem.WithTakeoverAfter(time.Second)), "k",
				func(context.Context, *sql.Tx) (int, error) { return 0, errors.New("ran") })
			assert.ErrorIs(t, err, idem.ErrInProgress, "the stopped owner holds the key")
			wait := newGuard[int](t, e.store, idem.WithTakeoverAfter(time.Second), idem.OnDuplicate(idem.Wait))
			short, cancel := context.WithTimeout(ctxT(t), 2*time.Second)
			_, err = sqlstore.DoTx(short, wait, "k", func(context.Context, *sql.Tx) (int, error) { return 0, errors.New("ran") })
			cancel()
			assert.Error(t, err, "Wait waits for the stopped owner, past the takeover threshold, until its context ends")
			require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
			v, err := sqlstore.DoTx(ctxT(t), wait, "k", func(context.Context, *sql.Tx) (int, error) { return 0, errors.New("ran") })
			require.NoError(t, err)
			assert.Equal(t, cmd.Process.Pid, v, "the continued owner committed; Wait replays it")
			require.NoError(t, cmd.Wait())
			assert.Equal(t, 1, sideRows(t, d, side, "k"))
		})
	})
}

// TestDoTxStepOneCommit: a Step inside a one-commit DoTx records its
// outcome on a connection of its own, so the step survives the rollback
// of fn's transaction: a DoTx whose fn ran the step and then failed (as a
// crash would end it) leaves no record of the call but the step's, and
// the retry runs fn again (attempt 1), replays the step without running
// it, with the same StepKey, and commits one row.
func TestDoTxStepOneCommit(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		e := newEnv(t, d)
		side := sideTable(t, d)
		g := newGuard[int](t, e.store)
		ctx := ctxT(t)
		var charges atomic.Int32
		var keys []string
		fn := func(fail error) func(ctx context.Context, tx *sql.Tx) (int, error) {
			return func(ctx context.Context, tx *sql.Tx) (int, error) {
				v, err := idem.Step(ctx, "charge", func(ctx context.Context) (int, error) {
					k, _ := idem.StepKey(ctx)
					keys = append(keys, k)
					return int(charges.Add(1)), nil
				})
				if err != nil {
					return 0, err
				}
				if err := insertSide(ctx, tx, d, side, "k"); err != nil {
					return 0, err
				}
				return v, fail
			}
		}
		_, err := sqlstore.DoTx(ctx, g, "k", fn(errors.New("after the charge")))
		require.Error(t, err)
		assert.Zero(t, sideRows(t, d, side, "k"))
		v, err := sqlstore.DoTx(ctx, g, "k", fn(nil))
		require.NoError(t, err)
		assert.Equal(t, 1, v, "the step's recorded outcome")
		assert.EqualValues(t, 1, charges.Load(), "the step ran once")
		assert.Len(t, keys, 1)
		assert.Equal(t, 1, sideRows(t, d, side, "k"))
	})
}

// TestDoTxOneCommitStaleOwnerLate: a one-commit DoTx that takes over a
// stale claim writes nothing until its commit, so the stale owner, going
// on, still finds its own claim and completes it while the DoTx's fn runs;
// the DoTx's completion is conditioned on the row being as its claim read
// it, so it is refused, its transaction (fn's row) rolls back, and the
// call answers with the owner's outcome. Without that condition the DoTx
// overwrites the owner's record and both runs' outcomes stand.
func TestDoTxOneCommitStaleOwnerLate(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		if d == sqlstore.SQLite {
			t.Skip("SQLite's DoTx holds the database's write lock: the owner's completion waits for it")
		}
		e := newEnv(t, d)
		side := sideTable(t, d)
		g := newGuard[int](t, e.store)
		ctx := ctxT(t)
		sk := guardKey(t, g, "late")
		res, err := e.store.Claim(ctx, storekit.ClaimRequest{Key: sk, Nonce: "owner", LeaseTTL: time.Minute, TakeoverAfter: 100 * time.Millisecond})
		require.NoError(t, err)
		require.Equal(t, storekit.Claimed, res.Outcome)
		time.Sleep(300 * time.Millisecond) // no heartbeat: stale by its own threshold

		running, finish := make(chan struct{}), make(chan struct{})
		var token int64
		done := make(chan error, 1)
		var got int
		go func() {
			var err error
			got, err = sqlstore.DoTx(ctx, g, "late", func(ctx context.Context, tx *sql.Tx) (int, error) {
				token, _ = idem.FencingToken(ctx)
				if err := insertSide(ctx, tx, d, side, "late"); err != nil {
					return 0, err
				}
				close(running)
				<-finish
				return 2, nil
			})
			done <- err
		}()
		select {
		case <-running:
		case err := <-done:
			t.Fatalf("DoTx returned before its fn ran: %v", err)
		}
		assert.EqualValues(t, 2, token, "the DoTx took the stale claim over")
		// The stale owner goes on: its claim is still the row's.
		require.NoError(t, e.store.Complete(ctx, sk, "owner", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("1"), TTL: time.Hour}))
		close(finish)
		require.NoError(t, <-done)
		assert.Equal(t, 1, got, "the call answers with the owner's outcome")
		assert.Equal(t, 0, sideRows(t, d, side, "late"), "the DoTx's row rolled back")
		rec, err := e.store.Get(ctx, sk)
		require.NoError(t, err)
		assert.Equal(t, "owner", rec.Nonce, "the owner's record stands")
	})
}
