package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/sqlstore"
)

// TestStepTx: a StepTx runs fn once and commits its write with the step's
// record: a second StepTx of the name in the same attempt, and a later
// attempt of the call (after the call's fn failed and was released),
// replay the value without running fn, and the side table holds one row.
// An error from fn rolls its write back, leaves no record, and a later
// StepTx runs fn again.
func TestStepTx(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		e := newEnv(t, d)
		side := sideTable(t, d)
		g := newGuard[int](t, e.store)
		ctx := ctxT(t)
		var runs atomic.Int32
		order := func(ctx context.Context, tx *sql.Tx) (int, error) {
			runs.Add(1)
			return 7, insertSide(ctx, tx, d, side, "order")
		}
		again := errors.New("the call fails after its step")
		_, err := g.Do(ctx, "k", func(ctx context.Context) (int, error) {
			v, err := sqlstore.StepTx(ctx, "order", order)
			require.NoError(t, err)
			assert.Equal(t, 7, v)
			v, err = sqlstore.StepTx(ctx, "order", order)
			require.NoError(t, err, "the same attempt: replayed")
			assert.Equal(t, 7, v)
			return 0, again
		})
		require.ErrorIs(t, err, again)
		v, err := g.Do(ctx, "k", func(ctx context.Context) (int, error) {
			return sqlstore.StepTx(ctx, "order", order)
		})
		require.NoError(t, err, "a later attempt: replayed")
		assert.Equal(t, 7, v)
		assert.EqualValues(t, 1, runs.Load(), "fn ran once")
		assert.Equal(t, 1, sideRows(t, d, side, "order"))

		boom := errors.New("boom")
		_, err = g.Do(ctx, "f", func(ctx context.Context) (int, error) {
			return sqlstore.StepTx(ctx, "order", func(ctx context.Context, tx *sql.Tx) (int, error) {
				require.NoError(t, insertSide(ctx, tx, d, side, "f"))
				return 0, boom
			})
		})
		require.ErrorIs(t, err, boom)
		assert.Equal(t, 0, sideRows(t, d, side, "f"), "fn's write is rolled back with its error")
		v, err = g.Do(ctx, "f", func(ctx context.Context) (int, error) {
			return sqlstore.StepTx(ctx, "order", func(ctx context.Context, tx *sql.Tx) (int, error) {
				key, ok := idem.StepKey(ctx)
				require.True(t, ok, "StepKey inside StepTx's fn")
				require.Len(t, key, 64)
				token, _ := idem.FencingToken(ctx)
				return int(token), insertSide(ctx, tx, d, side, "f")
			})
		})
		require.NoError(t, err, "nothing was recorded: a later attempt runs fn")
		assert.Equal(t, 2, v, "the step's second claim (the first was released)")
		assert.Equal(t, 1, sideRows(t, d, side, "f"))
	})
}

// TestStepTxInvalid: StepTx outside a guarded fn is idem.ErrNoCall, on a
// call whose store is not a sqlstore or with a nil fn
// storekit.ErrInvalidOption.
func TestStepTxInvalid(t *testing.T) {
	fn := func(context.Context, *sql.Tx) (int, error) { return 1, nil }
	_, err := sqlstore.StepTx(context.Background(), "s", fn)
	assert.ErrorIs(t, err, idem.ErrNoCall)
	ms, err := memstore.New()
	require.NoError(t, err)
	_, err = newGuard[int](t, ms).Do(context.Background(), "k", func(ctx context.Context) (int, error) {
		return sqlstore.StepTx(ctx, "s", fn)
	})
	assert.ErrorIs(t, err, storekit.ErrInvalidOption)
	_, err = newGuard[int](t, ms).Do(context.Background(), "k2", func(ctx context.Context) (int, error) {
		return sqlstore.StepTx[int](ctx, "s", nil)
	})
	assert.ErrorIs(t, err, storekit.ErrInvalidOption)
}

// stepKeyOf returns, with the observer it sets on a Guard, the storage key
// of the last step that ran.
func stepKeyOf() (idem.Option, func() string) {
	var key atomic.Value
	key.Store("")
	o := idem.Observer(func(_ context.Context, ev idem.Event) {
		if ev.Kind == idem.EventStepRun {
			key.Store(ev.StorageKey)
		}
	})
	return idem.WithObserver(o), func() string { return key.Load().(string) }
}

// TestStepTxStolenClaim: the step's claim is taken over while fn's
// transaction is open (the owner's heartbeat has not noticed): the
// completion's nonce condition matches no row, the transaction is rolled
// back, StepTx answers storekit.ErrLostOwnership, and nothing of fn's is
// visible.
func TestStepTxStolenClaim(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		e := newEnv(t, d)
		side := sideTable(t, d)
		other, err := sqlstore.New(sharedDB(t, d), d, sqlstore.WithTable(e.table))
		require.NoError(t, err)
		obs, stepKey := stepKeyOf()
		// The heartbeat is far off: only the nonce condition can notice.
		g := newGuard[int](t, e.store, obs, idem.WithTakeoverAfter(time.Hour), idem.WithHeartbeat(30*time.Minute))
		ctx := ctxT(t)
		var stolen storekit.ClaimResult
		_, err = g.Do(ctx, "k", func(ctx context.Context) (int, error) {
			return sqlstore.StepTx(ctx, "order", func(ctx context.Context, tx *sql.Tx) (int, error) {
				if err := insertSide(ctx, tx, d, side, "k"); err != nil {
					return 0, err
				}
				key := stepKey()
				age(t, e, key, 2*time.Hour)
				r := claimReq(key)
				r.TakeoverAfter = time.Hour
				r.PayloadHash = storekit.StepPayload // a step's claim
				var err error
				stolen, err = other.Claim(ctx, r)
				require.NoError(t, err)
				return 1, nil
			})
		})
		require.Equal(t, storekit.TookOver, stolen.Outcome)
		assert.ErrorIs(t, err, storekit.ErrLostOwnership)
		assert.Equal(t, 0, sideRows(t, d, side, "k"), "fn's write was rolled back")
		rec, err := e.store.Get(ctx, stolen.Record.Key)
		require.NoError(t, err)
		assert.Equal(t, storekit.StatusInProgress, rec.Status)
		assert.Equal(t, stolen.Record.Nonce, rec.Nonce, "the new owner's claim is untouched")
	})
}

// TestStepTxRoundTrips: a StepTx whose fn does one INSERT costs the step's
// claim, BEGIN, the INSERT, the completion UPDATE and the COMMIT: two
// round trips more than the same INSERT in a plain transaction, none
// beyond; a replayed StepTx costs one.
func TestStepTxRoundTrips(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		e := newCountedEnv(t, d)
		side := sideTable(t, d)
		g := newGuard[int](t, e.store)
		ctx := ctxT(t)
		plain := func(k string) {
			tx, err := e.db.BeginTx(ctx, nil)
			require.NoError(t, err)
			require.NoError(t, insertSide(ctx, tx, d, side, k))
			require.NoError(t, tx.Commit())
		}
		var ran, replayed int64
		measure := func(key string) {
			_, err := g.Do(ctx, key, func(ctx context.Context) (int, error) {
				// The attempt's steps epoch is read by its first step.
				if _, err := idem.Step(ctx, "first", func(context.Context) (int, error) { return 1, nil }); err != nil {
					return 0, err
				}
				order := func(ctx context.Context, tx *sql.Tx) (int, error) { return 1, insertSide(ctx, tx, d, side, key) }
				before := e.rt.Load()
				if _, err := sqlstore.StepTx(ctx, "order", order); err != nil {
					return 0, err
				}
				ran = e.rt.Load() - before
				before = e.rt.Load()
				if _, err := sqlstore.StepTx(ctx, "order", order); err != nil {
					return 0, err
				}
				replayed = e.rt.Load() - before
				return 1, nil
			})
			require.NoError(t, err)
		}
		measure("warm") // statements prepared
		plain("warm")
		before := e.rt.Load()
		plain("p")
		raw := e.rt.Load() - before
		measure("x")
		t.Logf("plain transaction: %d round trips; StepTx that runs: %d; replayed: %d", raw, ran, replayed)
		assert.Equal(t, raw+2, ran, "the step's claim and its completion inside the transaction")
		assert.EqualValues(t, 1, replayed, "a replay is the step's claim alone")
	})
}

// TestDoTxStepOneConnection: a DoTx whose fn calls Step on a pool of one
// connection (which fn's transaction holds) is refused at once with an
// error matching storekit.ErrInvalidOption that says why, not when the claim
// lapses; with two connections the same call completes.
func TestDoTxStepOneConnection(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		db := openDB(t, d, dsn(t, d), nil)
		t.Cleanup(func() { _ = db.Close() })
		db.SetMaxOpenConns(1)
		e := newEnvOn(t, d, db, nil)
		takeover := 2 * time.Second
		g := newGuard[int](t, e.store, idem.WithTakeoverAfter(takeover))
		ctx := ctxT(t)
		fn := func(ctx context.Context, tx *sql.Tx) (int, error) {
			return idem.Step(ctx, "charge", func(context.Context) (int, error) { return 5, nil })
		}
		start := time.Now()
		_, err := sqlstore.DoTx(ctx, g, "k", fn)
		took := time.Since(start)
		require.ErrorIs(t, err, storekit.ErrInvalidOption)
		assert.Contains(t, err.Error(), "SetMaxOpenConns(1)")
		assert.Less(t, took, takeover, "refused before the claim could lapse")
		t.Logf("refused after %v: %v", took.Round(time.Millisecond), err)

		db.SetMaxOpenConns(2)
		v, err := sqlstore.DoTx(ctx, g, "k", fn)
		require.NoError(t, err, "the refusal was released; two connections suffice")
		assert.Equal(t, 5, v)
	})
}

// TestStepTxCommitReplyLost: the server applies the COMMIT of a StepTx and
// its reply is lost: StepTx reads the step's record back (as DoTx does),
// finds its completion and returns the value; a replay returns it without
// running fn, one row. When the completion's own reply is lost, no COMMIT
// is sent: StepTx says so with a *storekit.StoreError (not an unknown
// outcome), nothing is committed, and a later attempt runs fn again.
func TestStepTxCommitReplyLost(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		h := &hooks{}
		db, proxy := proxiedDB(t, d, h)
		e := newEnvOn(t, d, db, nil)
		side := sideTable(t, d)
		g := newGuard[int](t, e.store, idem.WithTakeoverAfter(time.Second))
		ctx := ctxT(t)
		var runs atomic.Int32
		order := func(key string, arm func()) func(ctx context.Context, tx *sql.Tx) (int, error) {
			return func(ctx context.Context, tx *sql.Tx) (int, error) {
				runs.Add(1)
				if err := insertSide(ctx, tx, d, side, key); err != nil {
					return 0, err
				}
				arm()
				return 7, nil
			}
		}
		commitLost := func() {
			// The completion UPDATE is the next statement; the reply after
			// its reply (the COMMIT's) is lost.
			h.arm(func(q string) bool { return strings.Contains(q, "completed_at") }, proxy.DropNextReply)
		}
		v, err := g.Do(ctx, "c", func(ctx context.Context) (int, error) {
			return sqlstore.StepTx(ctx, "order", order("c", commitLost))
		})
		require.NoError(t, err, "the commit applied: read back, it is the step's outcome")
		assert.Equal(t, 7, v)
		assert.Equal(t, 1, proxy.Dropped(), "a reply was lost")
		assert.Equal(t, 1, sideRows(t, d, side, "c"))

		runs.Store(0)
		_, err = g.Do(ctx, "u", func(ctx context.Context) (int, error) {
			return sqlstore.StepTx(ctx, "order", order("u", proxy.DropNextReply)) // the next reply: the completion's
		})
		var se *storekit.StoreError
		require.ErrorAs(t, err, &se)
		assert.NotErrorIs(t, err, storekit.ErrOutcomeUnknown)
		assert.Equal(t, 0, sideRows(t, d, side, "u"), "nothing committed")
		v, err = g.Do(ctx, "u", func(ctx context.Context) (int, error) {
			return sqlstore.StepTx(ctx, "order", order("u", func() {}))
		})
		require.NoError(t, err)
		assert.Equal(t, 7, v)
		assert.EqualValues(t, 2, runs.Load(), "the later attempt ran fn again")
		assert.Equal(t, 1, sideRows(t, d, side, "u"))
	})
}

// TestStepTxRotationRelease: under WithSecret(A, B) a call runs StepTx
// "order" and then ends without an outcome (an error, a panic, a
// cancelled context), so its claim is released; the retry runs on a Guard
// configured WithSecret(B, A). The order is replayed: one row, fn run
// once, and the call's fencing token goes up.
func TestStepTxRotationRelease(t *testing.T) {
	secretA, secretB := []byte("steptx-rotation-secret-a"), []byte("steptx-rotation-secret-b")
	for _, d := range append(dialects, sqlstore.SQLite) {
		t.Run(d.String(), func(t *testing.T) { stepTxRotationRelease(t, d, secretA, secretB) })
	}
}

func stepTxRotationRelease(t *testing.T, d sqlstore.Dialect, secretA, secretB []byte) {
	{
		e := newEnv(t, d)
		side := sideTable(t, d)
		for _, end := range []string{"error", "panic", "cancel"} {
			t.Run(end, func(t *testing.T) {
				gAB := newGuard[int](t, e.store, idem.WithSecret(secretA, secretB))
				gBA := newGuard[int](t, e.store, idem.WithSecret(secretB, secretA))
				key, row := "rot-"+end, "rot-"+end
				var runs atomic.Int32
				var tokens []int64
				order := func(ctx context.Context, tx *sql.Tx) (int, error) {
					runs.Add(1)
					return 7, insertSide(ctx, tx, d, side, row)
				}
				call := func(ctx context.Context) (int, error) {
					tok, _ := idem.FencingToken(ctx)
					tokens = append(tokens, tok)
					return sqlstore.StepTx(ctx, "order", order)
				}
				ctx, cancel := context.WithCancel(ctxT(t))
				switch end {
				case "error":
					_, err := gAB.Do(ctx, key, func(ctx context.Context) (int, error) {
						if _, err := call(ctx); err != nil {
							return 0, err
						}
						return 0, errors.New("the call fails after its step")
					})
					require.Error(t, err)
				case "panic":
					func() {
						defer func() { _ = recover() }()
						_, _ = gAB.Do(ctx, key, func(ctx context.Context) (int, error) {
							_, _ = call(ctx)
							panic("fn panics after its step")
						})
					}()
				case "cancel":
					_, _ = gAB.Do(ctx, key, func(ctx context.Context) (int, error) {
						_, _ = call(ctx)
						cancel()
						return 0, ctx.Err()
					})
				}
				cancel()
				v, err := gBA.Do(ctxT(t), key, call)
				require.NoError(t, err)
				assert.Equal(t, 7, v)
				assert.EqualValues(t, 1, runs.Load(), "the order's fn ran once")
				assert.Equal(t, 1, sideRows(t, d, side, row), "one order row")
				require.Len(t, tokens, 2)
				assert.Greater(t, tokens[1], tokens[0], "the fencing token goes up")
			})
		}
	}
}
