package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/sqlstore"
)

var (
	sqliteDirOnce sync.Once
	sqliteDir     string
)

// sqliteDSN is the database file of this test process (and of the
// processes it starts, which inherit IDEM_SQLITE_TEST_FILE).
func sqliteDSN() string {
	sqliteDirOnce.Do(func() {
		if f := os.Getenv("IDEM_SQLITE_TEST_FILE"); f != "" {
			sqliteDir = f
			return
		}
		dir, err := os.MkdirTemp("", "idem-sqlite-")
		if err != nil {
			panic(err)
		}
		sqliteDir = filepath.Join(dir, "idem.db")
		os.Setenv("IDEM_SQLITE_TEST_FILE", sqliteDir)
	})
	return "file:" + sqliteDir + "?" + sqlstore.SQLiteDSNParams
}

func openSQLite(t testing.TB, source string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", source)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// sqliteStore opens a store on table over a pool of its own (one per
// process, as an application has).
func sqliteStore(table string) (storekit.Store, error) {
	db, err := sql.Open("sqlite", sqliteDSN())
	if err != nil {
		return nil, err
	}
	s, err := sqlstore.New(db, sqlstore.SQLite, sqlstore.WithTable(table))
	if err != nil {
		return nil, err
	}
	return s, s.Migrate(context.Background())
}

// TestSQLiteStepTx: on SQLite, a StepTx commits its row with the step's
// record once (a later attempt replays it without running fn), and an
// error from fn leaves neither; DoTx commits its row with the outcome, and
// a Step inside DoTx's fn is refused at once (fn's transaction holds the
// write lock).
func TestSQLiteStepTx(t *testing.T) {
	d := sqlstore.SQLite
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
		if _, err := sqlstore.StepTx(ctx, "order", order); err != nil {
			return 0, err
		}
		return 0, again
	})
	require.ErrorIs(t, err, again)
	v, err := g.Do(ctx, "k", func(ctx context.Context) (int, error) { return sqlstore.StepTx(ctx, "order", order) })
	require.NoError(t, err)
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

	v, err = sqlstore.DoTx(ctx, g, "tx", func(ctx context.Context, tx *sql.Tx) (int, error) {
		return 3, insertSide(ctx, tx, d, side, "tx")
	})
	require.NoError(t, err)
	assert.Equal(t, 3, v)
	v, err = sqlstore.DoTx(ctx, g, "tx", func(ctx context.Context, tx *sql.Tx) (int, error) {
		t.Error("replay ran fn")
		return 0, nil
	})
	require.NoError(t, err)
	assert.Equal(t, 3, v)
	assert.Equal(t, 1, sideRows(t, d, side, "tx"))

	start := time.Now()
	_, err = sqlstore.DoTx(ctx, g, "step-in-tx", func(ctx context.Context, tx *sql.Tx) (int, error) {
		return idem.Step(ctx, "charge", func(context.Context) (int, error) { return 1, nil })
	})
	require.ErrorIs(t, err, storekit.ErrInvalidOption)
	assert.Less(t, time.Since(start), 2*time.Second, "refused at once, not after the busy timeout")
}

// TestSQLiteDoTxOneCommit: on SQLite too DoTx claims inside its
// transaction: while fn runs another connection sees no record of the key,
// an error from fn leaves none, and the retry commits the record with
// fn's row.
func TestSQLiteDoTxOneCommit(t *testing.T) {
	d := sqlstore.SQLite
	e := newEnv(t, d)
	side := sideTable(t, d)
	g := newGuard[int](t, e.store)
	ctx := ctxT(t)
	rows := func() (n int) {
		require.NoError(t, e.db.QueryRowContext(ctx, "SELECT count(*) FROM "+e.table).Scan(&n))
		return n
	}
	boom := errors.New("boom")
	_, err := sqlstore.DoTx(ctx, g, "k", func(ctx context.Context, tx *sql.Tx) (int, error) {
		require.NoError(t, insertSide(ctx, tx, d, side, "k"))
		return 0, boom
	})
	require.ErrorIs(t, err, boom)
	assert.Zero(t, rows(), "fn's error left no record")
	v, err := sqlstore.DoTx(ctx, g, "k", func(ctx context.Context, tx *sql.Tx) (int, error) {
		token, _ := idem.FencingToken(ctx)
		return int(token), insertSide(ctx, tx, d, side, "k")
	})
	require.NoError(t, err)
	assert.Equal(t, 1, v, "a fresh claim: nothing was left to take over")
	assert.Equal(t, 1, rows())
	assert.Equal(t, 1, sideRows(t, d, side, "k"))
}

// TestSQLiteMigrateNoBusyTimeout: a pool whose connections have no busy
// timeout is refused by Migrate (an storekit.ErrInvalidOption).
func TestSQLiteMigrateNoBusyTimeout(t *testing.T) {
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "x.db"))
	require.NoError(t, err)
	defer db.Close()
	s, err := sqlstore.New(db, sqlstore.SQLite, sqlstore.WithoutCleanup())
	require.NoError(t, err)
	require.ErrorIs(t, s.Migrate(ctxT(t)), storekit.ErrInvalidOption)
}

// TestSQLiteClaimRace: 16 pools (as 16 processes would have) claim each
// of 30 fresh keys at once: exactly one claim per key wins.
func TestSQLiteClaimRace(t *testing.T) {
	table := "idem_race_" + randHex(6)
	t.Cleanup(func() { dropTable(t, sqlstore.SQLite, table) })
	stores := make([]storekit.Store, 16)
	for i := range stores {
		s, err := sqliteStore(table)
		require.NoError(t, err)
		stores[i] = s
	}
	ctx := ctxT(t)
	for range 30 {
		key := storageKey()
		var won atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, s := range stores {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				res, err := s.Claim(ctx, claimReq(key))
				if err != nil {
					t.Error(err)
					return
				}
				if res.Outcome == storekit.Claimed {
					won.Add(1)
				}
			}()
		}
		close(start)
		wg.Wait()
		require.EqualValues(t, 1, won.Load(), "claims won on one key")
	}
}
