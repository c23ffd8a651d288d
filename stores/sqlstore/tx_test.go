package sqlstore_test

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
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
	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/sqlstore"
)

// sideTable creates a table for fn's own writes (one row per run of fn,
// no unique key, so a second run shows as a second row) and drops it at
// the end.
func sideTable(t testing.TB, d sqlstore.Dialect) string {
	t.Helper()
	name := "idem_side_" + randHex(6)
	_, err := sharedDB(t, d).Exec("CREATE TABLE " + name + " (k VARCHAR(100) NOT NULL, attempt BIGINT NOT NULL, pid INT NOT NULL)")
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = sharedDB(t, d).Exec("DROP TABLE IF EXISTS " + name) })
	return name
}

// insertSide is fn's write: a row for key with the call's fencing token.
func insertSide(ctx context.Context, tx *sql.Tx, d sqlstore.Dialect, table, key string) error {
	token, _ := idem.FencingToken(ctx)
	_, err := tx.ExecContext(ctx, ph3(d, "INSERT INTO "+table+" (k, attempt, pid) VALUES (?, ?, ?)"), key, token, os.Getpid())
	return err
}

// ph3 turns ?s into PostgreSQL's $n.
func ph3(d sqlstore.Dialect, q string) string {
	if d == sqlstore.MySQL {
		return q
	}
	var b strings.Builder
	n := 0
	for _, c := range q {
		if c == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

func sideRows(t testing.TB, d sqlstore.Dialect, table, key string) int {
	t.Helper()
	var n int
	require.NoError(t, sharedDB(t, d).QueryRow(ph3(d, "SELECT count(*) FROM "+table+" WHERE k = ?"), key).Scan(&n))
	return n
}

// TestDoTx: fn's write and the outcome commit together: a replay returns
// the outcome without running fn; an error from fn rolls its write back
// and a retry runs fn again; a DoTx on a Guard whose store is not a
// sqlstore, or with a nil fn, is an storekit.ErrInvalidOption.
func TestDoTx(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		e := newEnv(t, d)
		side := sideTable(t, d)
		g := newGuard[int](t, e.store)
		ctx := ctxT(t)
		var runs atomic.Int32
		fn := func(ctx context.Context, tx *sql.Tx) (int, error) {
			runs.Add(1)
			return 7, insertSide(ctx, tx, d, side, "a")
		}
		v, err := sqlstore.DoTx(ctx, g, "a", fn)
		require.NoError(t, err)
		assert.Equal(t, 7, v)
		v, err = sqlstore.DoTx(ctx, g, "a", fn)
		require.NoError(t, err)
		assert.Equal(t, 7, v)
		assert.EqualValues(t, 1, runs.Load(), "a replay does not run fn")
		assert.Equal(t, 1, sideRows(t, d, side, "a"))

		boom := errors.New("boom")
		_, err = sqlstore.DoTx(ctx, g, "b", func(ctx context.Context, tx *sql.Tx) (int, error) {
			require.NoError(t, insertSide(ctx, tx, d, side, "b"))
			return 0, boom
		})
		assert.ErrorIs(t, err, boom)
		assert.Equal(t, 0, sideRows(t, d, side, "b"), "fn's write is rolled back with its error")
		v, err = sqlstore.DoTx(ctx, g, "b", func(ctx context.Context, tx *sql.Tx) (int, error) {
			return 8, insertSide(ctx, tx, d, side, "b")
		})
		require.NoError(t, err, "the failure was released: a retry runs fn")
		assert.Equal(t, 8, v)
		assert.Equal(t, 1, sideRows(t, d, side, "b"))

		// Also through Listen's WatchingStore (PostgreSQL).
		if d == sqlstore.Postgres {
			ws, err := e.store.Listen()
			require.NoError(t, err)
			gw := newGuard[int](t, ws)
			v, err = sqlstore.DoTx(ctx, gw, "c", func(ctx context.Context, tx *sql.Tx) (int, error) {
				return 9, insertSide(ctx, tx, d, side, "c")
			})
			require.NoError(t, err)
			assert.Equal(t, 9, v)
		}
	})
}

func TestDoTxInvalid(t *testing.T) {
	ms, err := memstore.New()
	require.NoError(t, err)
	gm := newGuard[int](t, ms)
	_, err = sqlstore.DoTx(context.Background(), gm, "k", func(context.Context, *sql.Tx) (int, error) { return 1, nil })
	assert.ErrorIs(t, err, storekit.ErrInvalidOption)
	var g *idem.Guard[int]
	_, err = sqlstore.DoTx(context.Background(), g, "k", func(context.Context, *sql.Tx) (int, error) { return 1, nil })
	assert.ErrorIs(t, err, storekit.ErrInvalidOption)
	s, err := sqlstore.New(&sql.DB{}, sqlstore.Postgres)
	require.NoError(t, err)
	_, err = sqlstore.DoTx(context.Background(), newGuard[int](t, s), "k", nil)
	assert.ErrorIs(t, err, storekit.ErrInvalidOption)
}

// TestDoTxStolenClaim: the claim is taken over while fn's transaction is
// open (the owner's heartbeat has not noticed): the completion's nonce
// condition matches no row, the transaction is rolled back, DoTx answers
// storekit.ErrLostOwnership, and nothing of fn's is visible.
func TestDoTxStolenClaim(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		e := newEnv(t, d)
		if sqlstore.OneCommit(e.store) {
			oneCommitStolenClaim(t, e, d)
			return
		}
		side := sideTable(t, d)
		other, err := sqlstore.New(sharedDB(t, d), d, sqlstore.WithTable(e.table))
		require.NoError(t, err)
		// The heartbeat is far off: only the nonce condition can notice.
		g := newGuard[int](t, e.store, idem.WithTakeoverAfter(time.Hour), idem.WithHeartbeat(30*time.Minute))
		ctx := ctxT(t)
		var stolen storekit.ClaimResult
		_, err = sqlstore.DoTx(ctx, g, "k", func(ctx context.Context, tx *sql.Tx) (int, error) {
			if err := insertSide(ctx, tx, d, side, "k"); err != nil {
				return 0, err
			}
			var key string
			require.NoError(t, sharedDB(t, d).QueryRow("SELECT key_hash FROM "+e.table).Scan(&key))
			age(t, e, key, 2*time.Hour)
			r := claimReq(key)
			r.TakeoverAfter = time.Hour
			var err error
			stolen, err = other.Claim(ctx, r)
			require.NoError(t, err)
			return 1, nil
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

// oneCommitStolenClaim is TestDoTxStolenClaim where DoTx claims inside its
// transaction, so that nothing of its claim is visible before its commit
// and no other caller can take it over: DoTx takes over a stale claim of
// another owner, which comes back while fn runs and completes its call
// (its nonce still matches: nothing was written over it). The completion,
// conditioned on the row as the claim read it, matches no row: rolled
// back, nothing of fn's visible, and the other owner's outcome stands;
// nothing of the call committed, so it looks at the key again and is
// answered with that outcome, as a duplicate is.
func oneCommitStolenClaim(t *testing.T, e *env, d sqlstore.Dialect) {
	side := sideTable(t, d)
	other, err := sqlstore.New(sharedDB(t, d), d, sqlstore.WithTable(e.table))
	require.NoError(t, err)
	var sk string
	g := newGuard[int](t, e.store, idem.WithTakeoverAfter(time.Second), idem.WithObserver(func(_ context.Context, ev idem.Event) {
		if ev.Kind == idem.EventClaim {
			sk = ev.StorageKey
		}
	}))
	ctx := ctxT(t)
	_, err = sqlstore.DoTx(ctx, g, "k", func(context.Context, *sql.Tx) (int, error) { return 0, errors.New("no") })
	require.Error(t, err)
	require.NotEmpty(t, sk)
	_, err = e.store.Get(ctx, sk)
	require.ErrorIs(t, err, storekit.ErrNotFound, "fn's error left nothing")
	r := claimReq(sk)
	r.TakeoverAfter = time.Second
	old, err := other.Claim(ctx, r)
	require.NoError(t, err)
	age(t, e, sk, time.Minute) // stale
	var token int64
	runs := 0
	v, err := sqlstore.DoTx(ctx, g, "k", func(ctx context.Context, tx *sql.Tx) (int, error) {
		runs++
		token, _ = idem.FencingToken(ctx)
		if err := insertSide(ctx, tx, d, side, "k"); err != nil {
			return 0, err
		}
		require.NoError(t, other.Complete(ctx, sk, old.Record.Nonce, storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("5"), TTL: time.Hour}))
		return 1, nil
	})
	assert.EqualValues(t, 2, token, "a takeover")
	require.NoError(t, err)
	assert.Equal(t, 5, v, "the other owner's outcome")
	assert.Equal(t, 1, runs, "fn ran once: the second look replays")
	assert.Equal(t, 0, sideRows(t, d, side, "k"), "fn's write was rolled back")
	rec, err := e.store.Get(ctx, sk)
	require.NoError(t, err)
	assert.Equal(t, storekit.StatusCompleted, rec.Status)
	assert.Equal(t, old.Record.Nonce, rec.Nonce, "the other owner's outcome is untouched")
}

// proxiedDB opens a pool for d whose connections go through a
// testenv.Proxy and whose statements run h's hook.
func proxiedDB(t *testing.T, d sqlstore.Dialect, h *hooks) (*sql.DB, *testenv.Proxy) {
	t.Helper()
	if d == sqlstore.Postgres {
		cfg, err := pgx.ParseConfig(dsn(t, d))
		require.NoError(t, err)
		p := testenv.NewProxy(t, fmt.Sprintf("%s:%d", cfg.Host, cfg.Port))
		cfg.DialFunc = p.Dial
		db := sql.OpenDB(hookConnector{Connector: stdlib.GetConnector(*cfg), h: h})
		t.Cleanup(func() { _ = db.Close() })
		return db, p
	}
	cfg, err := mysql.ParseDSN(dsn(t, d))
	require.NoError(t, err)
	p := testenv.NewProxy(t, cfg.Addr)
	cfg.DialFunc = p.Dial
	conn, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	db := sql.OpenDB(hookConnector{Connector: conn, h: h})
	t.Cleanup(func() { _ = db.Close() })
	return db, p
}

// TestDoTxCommitReplyLost: the server applies the COMMIT and its reply is
// lost (the connection goes silent). DoTx reads the record back with a
// locking read, finds its completion, and returns the value; a replay
// returns it without running fn, and fn's row is there once.
func TestDoTxCommitReplyLost(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		h := &hooks{}
		db, proxy := proxiedDB(t, d, h)
		e := newEnvOn(t, d, db, nil)
		side := sideTable(t, d)
		g := newGuard[int](t, e.store, idem.WithTakeoverAfter(time.Second))
		ctx := ctxT(t)
		var runs atomic.Int32
		fn := func(ctx context.Context, tx *sql.Tx) (int, error) {
			runs.Add(1)
			// The completion UPDATE is the next statement; the reply
			// after its reply (the COMMIT's) is lost.
			h.arm(func(q string) bool { return strings.Contains(q, "completed_at") }, proxy.DropNextReply)
			return 7, insertSide(ctx, tx, d, side, "k")
		}
		v, err := sqlstore.DoTx(ctx, g, "k", fn)
		require.NoError(t, err, "the commit applied: read back, it is the call's outcome")
		assert.Equal(t, 7, v)
		assert.Equal(t, 1, proxy.Dropped(), "a reply was lost")
		v, err = sqlstore.DoTx(ctx, g, "k", fn)
		require.NoError(t, err)
		assert.Equal(t, 7, v)
		assert.EqualValues(t, 1, runs.Load())
		assert.Equal(t, 1, sideRows(t, d, side, "k"))
	})
}

// TestDoTxCompletionReplyLost: the completion UPDATE's reply is lost, so
// no COMMIT is ever sent: the transaction ends with its connection,
// nothing is committed, and DoTx says so with a *storekit.StoreError (not
// ErrNotRecorded, not an unknown outcome); a retry runs fn again and
// commits one row.
func TestDoTxCompletionReplyLost(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		h := &hooks{}
		db, proxy := proxiedDB(t, d, h)
		e := newEnvOn(t, d, db, nil)
		side := sideTable(t, d)
		g := newGuard[int](t, e.store, idem.WithTakeoverAfter(time.Second))
		ctx := ctxT(t)
		first := true
		_, err := sqlstore.DoTx(ctx, g, "k", func(ctx context.Context, tx *sql.Tx) (int, error) {
			if first {
				first = false
				if err := insertSide(ctx, tx, d, side, "k"); err != nil {
					return 0, err
				}
				proxy.DropNextReply() // the next reply: the completion's
				return 7, nil
			}
			return 0, errors.New("ran twice in one call")
		})
		var se *storekit.StoreError
		require.ErrorAs(t, err, &se)
		assert.NotErrorIs(t, err, storekit.ErrOutcomeUnknown)
		assert.NotErrorIs(t, err, storekit.ErrNotRecorded)
		assert.Equal(t, 0, sideRows(t, d, side, "k"))
		if sqlstore.OneCommit(e.store) {
			// The lost connection's session holds the key's lock until
			// the server notices the connection closed: a retry under
			// Return may be told "in progress" meanwhile; under Wait it
			// waits for the session's end, and runs.
			g = newGuard[int](t, e.store, idem.WithTakeoverAfter(time.Second), idem.OnDuplicate(idem.Wait))
		}
		v, err := sqlstore.DoTx(ctx, g, "k", func(ctx context.Context, tx *sql.Tx) (int, error) {
			return 8, insertSide(ctx, tx, d, side, "k")
		})
		require.NoError(t, err)
		assert.Equal(t, 8, v)
		assert.Equal(t, 1, sideRows(t, d, side, "k"))
	})
}

// Child processes of the DoTx process tests.
const (
	txRoleEnv  = "IDEM_SQLSTORE_TX_ROLE" // "owner" or "many"
	txTestEnv  = "IDEM_SQLSTORE_TX_TEST"
	txDialEnv  = "IDEM_SQLSTORE_TX_DIALECT"
	txTableEnv = "IDEM_SQLSTORE_TX_TABLE"
	txSideEnv  = "IDEM_SQLSTORE_TX_SIDE"
)

func txDialect(s string) sqlstore.Dialect {
	if s == sqlstore.MySQL.String() {
		return sqlstore.MySQL
	}
	return sqlstore.Postgres
}

// txChild runs the work of a child process and exits, when this process
// is one for test.
func txChild(t *testing.T) {
	role := os.Getenv(txRoleEnv)
	if role == "" || os.Getenv(txTestEnv) != t.Name() {
		return
	}
	d := txDialect(os.Getenv(txDialEnv))
	s, err := sqlstore.New(sharedDB(t, d), d, sqlstore.WithTable(os.Getenv(txTableEnv)))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	side := os.Getenv(txSideEnv)
	switch role {
	case "owner": // insert, say so, and wait to be killed
		g := newGuard[int](t, s, idem.WithTakeoverAfter(time.Second))
		_, err = sqlstore.DoTx(context.Background(), g, "k", func(ctx context.Context, tx *sql.Tx) (int, error) {
			if err := insertSide(ctx, tx, d, side, "k"); err != nil {
				return 0, err
			}
			fmt.Println("inserted")
			time.Sleep(time.Hour)
			return 1, nil
		})
		fmt.Println("error", err)
		os.Exit(2)
	case "precommit", "committed", "stopped": // see TestDoTxOneCommitKills
		txOneCommitChild(t, role, s, d, side)
	case "many": // 16 goroutines, each its own Guard, on one key
		var wg sync.WaitGroup
		var failed atomic.Bool
		for range 16 {
			// A long threshold: nobody is killed here, and a slow machine
			// must not lapse a live claim.
			g := newGuard[int](t, s, idem.OnDuplicate(idem.Wait), idem.WithTakeoverAfter(20*time.Second))
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				defer cancel()
				v, err := sqlstore.DoTx(ctx, g, "one", func(ctx context.Context, tx *sql.Tx) (int, error) {
					return os.Getpid(), insertSide(ctx, tx, d, side, "one")
				})
				if err != nil || v == 0 {
					fmt.Println("error", v, err)
					failed.Store(true)
				}
			}()
		}
		wg.Wait()
		if failed.Load() {
			os.Exit(2)
		}
		os.Exit(0)
	}
	os.Exit(2)
}

func startTxChild(t *testing.T, d sqlstore.Dialect, role, table, side string) (*exec.Cmd, io.Reader) {
	t.Helper()
	// The child runs the calling (sub)test alone: "^Top$/^sub$/...".
	cmd := exec.Command(os.Args[0], "-test.run=^"+strings.Join(strings.Split(t.Name(), "/"), "$/^")+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), txRoleEnv+"="+role, txTestEnv+"="+t.Name(), txDialEnv+"="+d.String(),
		txTableEnv+"="+table, txSideEnv+"="+side)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	return cmd, out
}

// TestDoTxKilledOwner: the owner process is SIGKILLed after fn inserted
// its row and before the commit; another caller takes the claim over once
// it is stale and runs fn again. At the end the side table holds exactly
// one row for the key, the takeover's (fencing token 2): the killed
// transaction died with its connection.
func TestDoTxKilledOwner(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		txChild(t)
		e := newEnv(t, d)
		side := sideTable(t, d)
		cmd, out := startTxChild(t, d, "owner", e.table, side)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "inserted" {
				break
			}
			t.Log("owner:", sc.Text())
		}
		require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
		_ = cmd.Wait()
		killed := time.Now()
		one := sqlstore.OneCommit(e.store)
		takeover := time.Second
		if one {
			takeover = time.Minute // nothing is left to take over: the next attempt must not wait for it
		}
		g := newGuard[int](t, e.store, idem.WithTakeoverAfter(takeover), idem.OnDuplicate(idem.Wait))
		ctx := ctxT(t)
		v, err := sqlstore.DoTx(ctx, g, "k", func(ctx context.Context, tx *sql.Tx) (int, error) {
			token, _ := idem.FencingToken(ctx)
			return int(token), insertSide(ctx, tx, d, side, "k")
		})
		require.NoError(t, err)
		t.Logf("the next attempt committed %v after the kill", time.Since(killed).Round(time.Millisecond))
		if one {
			assert.Equal(t, 1, v, "a fresh claim: the killed owner left no record")
			assert.Less(t, time.Since(killed), 10*time.Second, "ran at once, not after the takeover threshold")
		} else {
			assert.Equal(t, 2, v, "the takeover's attempt")
		}
		assert.Equal(t, 1, sideRows(t, d, side, "k"), "one row: the killed owner's insert never committed")
	})
}

// TestDoTxProcesses: 4 processes x 16 goroutines (each its own Guard,
// OnDuplicate(Wait)) call DoTx on one key: one row in the side table, and
// every caller gets the value of the run that committed it.
func TestDoTxProcesses(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		txChild(t)
		e := newEnv(t, d)
		side := sideTable(t, d)
		var cmds []*exec.Cmd
		var outs []*strings.Builder
		for range 4 {
			cmd, out := startTxChild(t, d, "many", e.table, side)
			var b strings.Builder
			go func() { _, _ = io.Copy(&b, out) }()
			cmds, outs = append(cmds, cmd), append(outs, &b)
		}
		for i, cmd := range cmds {
			if err := cmd.Wait(); err != nil {
				t.Errorf("process %d: %v", i, err)
			}
		}
		assert.Equal(t, 1, sideRows(t, d, side, "one"), "one run committed, across 64 callers in 4 processes")
		if t.Failed() {
			for i, b := range outs {
				t.Logf("process %d: %s", i, b.String())
			}
		}
	})
}

// settled waits until the only connection of db is back in the pool.
func settled(t *testing.T, db *sql.DB) {
	conn, err := db.Conn(ctxT(t))
	require.NoError(t, err)
	require.NoError(t, conn.Close())
}

// oneCommitProof shows that a fresh DoTx commits once: inside fn the key's
// record is not visible to another connection (the claim is not
// committed), and, on PostgreSQL, the record row and fn's row are written
// by one transaction (the same xmin).
func oneCommitProof(t *testing.T, e *env, d sqlstore.Dialect, g *idem.Guard[int], side string) {
	ctx := ctxT(t)
	var sk string
	reader, err := sqlstore.New(sharedDB(t, d), d, sqlstore.WithTable(e.table))
	require.NoError(t, err)
	_, err = sqlstore.DoTx(ctx, g, "one", func(ctx context.Context, tx *sql.Tx) (int, error) {
		var n int
		require.NoError(t, sharedDB(t, d).QueryRowContext(ctx, "SELECT count(*) FROM "+e.table+" WHERE status = 'in_progress'").Scan(&n))
		assert.Zero(t, n, "no claim is committed while fn runs")
		return 1, insertSide(ctx, tx, d, side, "one")
	})
	require.NoError(t, err)
	require.NoError(t, sharedDB(t, d).QueryRowContext(ctx, "SELECT key_hash FROM "+e.table+" ORDER BY started_at DESC LIMIT 1").Scan(&sk))
	rec, err := reader.Get(ctx, sk)
	require.NoError(t, err)
	assert.Equal(t, storekit.StatusCompleted, rec.Status)
	if d == sqlstore.Postgres {
		var recX, sideX string
		require.NoError(t, sharedDB(t, d).QueryRowContext(ctx, "SELECT xmin::text FROM "+e.table+" WHERE key_hash = $1", sk).Scan(&recX))
		require.NoError(t, sharedDB(t, d).QueryRowContext(ctx, "SELECT xmin::text FROM "+side+" WHERE k = 'one'").Scan(&sideX))
		assert.Equal(t, recX, sideX, "the record and fn's row: one transaction, one commit")
	}
}

// TestDoTxRoundTrips: a DoTx whose fn does one INSERT costs the claim, the
// transaction's BEGIN, the INSERT, the completion UPDATE and the COMMIT:
// two round trips more than the same INSERT in a plain transaction (the
// claim and the completion), none beyond.
func TestDoTxRoundTrips(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		e := newCountedEnv(t, d)
		side := sideTable(t, d)
		g := newGuard[int](t, e.store)
		ctx := ctxT(t)
		call := func(k string) {
			_, err := sqlstore.DoTx(ctx, g, k, func(ctx context.Context, tx *sql.Tx) (int, error) {
				return 1, insertSide(ctx, tx, d, side, k)
			})
			require.NoError(t, err)
		}
		plain := func(k string) {
			tx, err := e.db.BeginTx(ctx, nil)
			require.NoError(t, err)
			require.NoError(t, insertSide(ctx, tx, d, side, k))
			require.NoError(t, tx.Commit())
		}
		call("warm") // statements prepared
		plain("warm")
		before := e.rt.Load()
		plain("p")
		raw := e.rt.Load() - before
		before = e.rt.Load()
		call("x")
		settled(t, e.db) // MySQL lets go of its key lock after DoTx returns
		got := e.rt.Load() - before
		t.Logf("plain transaction: %d round trips; DoTx: %d", raw, got)
		// One commit or two, DoTx adds two round trips to a plain
		// transaction: the claim (or, with one commit, the claim's read
		// before BEGIN) and the completion. database/sql sends BEGIN and
		// COMMIT as round trips of their own, so neither can carry them.
		// MySQL's one commit adds a third: its key lock (GET_LOCK) is let
		// go after the commit (after DoTx has returned).
		want := raw + 2
		if d == sqlstore.MySQL && sqlstore.OneCommit(e.store) {
			want = raw + 3
		}
		assert.Equal(t, want, got)
		if sqlstore.OneCommit(e.store) {
			oneCommitProof(t, e, d, g, side)
		}
		call("x") // a replay (the first after the commit can carry the driver's deferred statement close)
		before = e.rt.Load()
		call("x")
		assert.EqualValues(t, wantTrips[map[sqlstore.Dialect]string{sqlstore.Postgres: "Postgres", sqlstore.MySQL: "MySQL/returning"}[d]].replay, e.rt.Load()-before, "a replay is the claim alone")
	})
}
