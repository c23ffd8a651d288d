package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/sqlstore"
	"github.com/idem-go/idem/stores/storetest"
)

func TestOptionsRejected(t *testing.T) {
	db := &sql.DB{} // never used: New does no I/O
	cases := map[string]struct {
		db      *sql.DB
		dialect sqlstore.Dialect
		opts    []sqlstore.Option
	}{
		"nil db":             {nil, sqlstore.Postgres, nil},
		"zero dialect":       {db, 0, nil},
		"unknown dialect":    {db, 7, nil},
		"nil option":         {db, sqlstore.MySQL, []sqlstore.Option{nil}},
		"empty table":        {db, sqlstore.Postgres, []sqlstore.Option{sqlstore.WithTable("")}},
		"injection":          {db, sqlstore.Postgres, []sqlstore.Option{sqlstore.WithTable("t; DROP TABLE users")}},
		"quote":              {db, sqlstore.MySQL, []sqlstore.Option{sqlstore.WithTable("t`x")}},
		"leading digit":      {db, sqlstore.MySQL, []sqlstore.Option{sqlstore.WithTable("1t")}},
		"two dots":           {db, sqlstore.Postgres, []sqlstore.Option{sqlstore.WithTable("a.b.c")}},
		"empty schema":       {db, sqlstore.Postgres, []sqlstore.Option{sqlstore.WithTable(".t")}},
		"long table":         {db, sqlstore.Postgres, []sqlstore.Option{sqlstore.WithTable(strings.Repeat("t", 49))}},
		"negative retention": {db, sqlstore.Postgres, []sqlstore.Option{sqlstore.WithRetention(-time.Second)}},
		"non-ascii letters":  {db, sqlstore.Postgres, []sqlstore.Option{sqlstore.WithTable("tablé")}},
		"nil logger":         {db, sqlstore.Postgres, []sqlstore.Option{sqlstore.WithLogger(nil)}},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := sqlstore.New(c.db, c.dialect, c.opts...)
			require.Error(t, err)
			assert.Nil(t, s)
			assert.ErrorIs(t, err, storekit.ErrInvalidOption)
			var oe *storekit.OptionError
			assert.True(t, errors.As(err, &oe), "%T", err)
		})
	}
	_, err := sqlstore.New(nil, 0, sqlstore.WithRetention(-1), nil, sqlstore.WithTable(""))
	storetest.CheckOptionErrors(t, err, "sqlstore.New", "sqlstore.New", "sqlstore.WithRetention", "sqlstore.New", "sqlstore.WithTable")
	assert.Contains(t, err.Error(), "idem: sqlstore.WithRetention: retention must not be negative, got -1ns")
	s, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithTable("idem.keys_v2"), sqlstore.WithRetention(0))
	require.NoError(t, err)
	assert.NoError(t, s.Validate())
	assert.Equal(t, "idem.keys_v2", s.Table())
	var nilStore *sqlstore.Store
	assert.ErrorIs(t, nilStore.Validate(), storekit.ErrInvalidOption)
	_, err = idem.New[int](nilStore)
	assert.ErrorIs(t, err, storekit.ErrInvalidOption, "idem.New validates the store")
}

func TestBadInput(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		e := newEnv(t, d)
		ctx := ctxT(t)
		long := "idem:" + strings.Repeat("a", 300)
		_, err := e.store.Claim(ctx, claimReq(long))
		assert.ErrorIs(t, err, storekit.ErrInvalidKey)
		_, err = e.store.Get(ctx, "")
		assert.ErrorIs(t, err, storekit.ErrInvalidKey)
		r := claimReq(storageKey())
		r.PayloadHash = strings.Repeat("p", 256)
		_, err = e.store.Claim(ctx, r)
		assert.Error(t, err)
		r = claimReq(storageKey())
		r.Nonce = ""
		_, err = e.store.Claim(ctx, r)
		assert.Error(t, err)
		key := storageKey()
		r = claimReq(key)
		_, err = e.store.Claim(ctx, r)
		require.NoError(t, err)
		err = e.store.Complete(ctx, key, r.Nonce, storekit.Completion{Status: "done", TTL: time.Minute})
		assert.Error(t, err)
		err = e.store.Complete(ctx, key, r.Nonce, storekit.Completion{Status: storekit.StatusFailed, TTL: time.Minute})
		assert.Error(t, err, "a failure needs an error")
		assert.ErrorIs(t, e.store.Heartbeat(ctx, key, "", time.Minute), storekit.ErrLostOwnership)
		// Text MySQL would cut short (invalid UTF-8) or compare loosely (a
		// trailing space) is refused before any statement, and nothing is
		// written.
		for _, bad := range []string{"\xff", "x\xe9y", "x "} {
			key := storageKey()
			_, err = e.store.Claim(ctx, claimReq(key+bad))
			assert.ErrorIs(t, err, storekit.ErrInvalidKey, "key %q", bad)
			r = claimReq(key)
			r.Nonce += bad
			_, err = e.store.Claim(ctx, r)
			assert.Error(t, err, "nonce %q", bad)
			r = claimReq(key)
			r.PayloadHash = "ph" + bad
			_, err = e.store.Claim(ctx, r)
			assert.Error(t, err, "payload hash %q", bad)
			_, err = e.store.Get(ctx, key)
			assert.ErrorIs(t, err, storekit.ErrNotFound, "%q", bad)
		}
		// Values that need quoting are parameters, never SQL.
		odd := "idem:'; DROP TABLE x; --"
		r = claimReq(odd)
		res, err := e.store.Claim(ctx, r)
		require.NoError(t, err)
		assert.Equal(t, storekit.Claimed, res.Outcome)
		got, err := e.store.Get(ctx, odd)
		require.NoError(t, err)
		assert.Equal(t, odd, got.Key)
	})
}

// TestAttemptsContinue checks the fencing token across release, expiry
// and purge. Time passes by moving the row's times into the past (the
// store decides with the database's clock).
func TestAttemptsContinue(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		// WithoutCleanup: the test counts what its own Purge calls delete.
		e := newEnv(t, d, sqlstore.WithRetention(time.Hour), sqlstore.WithoutCleanup())
		s, ctx, key := e.store, ctxT(t), storageKey()
		claim := func(want storekit.ClaimOutcome, attempt int64) storekit.ClaimRequest {
			t.Helper()
			r := claimReq(key)
			res, err := s.Claim(ctx, r)
			require.NoError(t, err)
			require.Equal(t, want, res.Outcome)
			require.Equal(t, attempt, res.Record.Attempt)
			return r
		}
		r := claim(storekit.Claimed, 1)
		require.NoError(t, s.Release(ctx, key, r.Nonce))
		_, err := s.Get(ctx, key)
		assert.ErrorIs(t, err, storekit.ErrNotFound, "a released record does not count")
		r = claim(storekit.Claimed, 2)
		require.NoError(t, s.Complete(ctx, key, r.Nonce, storekit.Completion{
			Status: storekit.StatusFailed, Error: &storekit.RecordedFailure{Message: "boom", Type: "x"}, TTL: time.Minute,
		}))
		claim(storekit.Existing, 2)
		age(t, e, key, time.Minute)
		r = claim(storekit.Claimed, 3)
		got, err := s.Get(ctx, key)
		require.NoError(t, err)
		assert.Nil(t, got.Error, "a re-claim clears the old failure")
		assert.Zero(t, got.CompletedAt)
		// Stale takeover: attempt + 1.
		age(t, e, key, time.Minute)
		claim(storekit.TookOver, 4)

		// Purge keeps rows within the grace, so attempts continue...
		r = claim(storekit.Existing, 4)
		_ = r
		age(t, e, key, leaseTTL+30*time.Minute)
		n, err := s.Purge(ctx)
		require.NoError(t, err)
		assert.Equal(t, 0, n)
		claim(storekit.Claimed, 5)
		// ...and deletes them after it.
		age(t, e, key, leaseTTL+2*time.Hour)
		n, err = s.Purge(ctx)
		require.NoError(t, err)
		assert.Equal(t, 1, n)
		claim(storekit.Claimed, 1)
	})
}

// TestOwnershipSameMillisecond: two heartbeats, or a complete retried, in
// one millisecond write the values the row already has (MySQL then reports
// zero affected rows); they still succeed, and a stranger still fails. On
// MySQL the session's clock is frozen (SET timestamp), so every statement
// runs in the same millisecond.
func TestOwnershipSameMillisecond(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		e := newEnv(t, d)
		if d == sqlstore.MySQL {
			e = newFrozenMySQLEnv(t)
		}
		s, ctx, key := e.store, ctxT(t), storageKey()
		r := claimReq(key)
		_, err := s.Claim(ctx, r)
		require.NoError(t, err)
		require.NoError(t, s.Heartbeat(ctx, key, r.Nonce, time.Second))
		require.NoError(t, s.Heartbeat(ctx, key, r.Nonce, time.Second))
		assert.ErrorIs(t, s.Heartbeat(ctx, key, "other", time.Second), storekit.ErrLostOwnership)
		c := storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("r"), TTL: time.Minute}
		require.NoError(t, s.Complete(ctx, key, r.Nonce, c))
		require.NoError(t, s.Complete(ctx, key, r.Nonce, c), "a retried complete succeeds")
		assert.ErrorIs(t, s.Complete(ctx, key, "other", c), storekit.ErrLostOwnership)
		assert.ErrorIs(t, s.Heartbeat(ctx, key, r.Nonce, time.Second), storekit.ErrLostOwnership, "completed")
		assert.ErrorIs(t, s.Release(ctx, key, r.Nonce), storekit.ErrLostOwnership, "completed")
		assert.ErrorIs(t, s.Release(ctx, storageKey(), r.Nonce), storekit.ErrLostOwnership, "missing")
	})
}

// TestTenantScope: a claim writes the request's tenant and scope into the
// row's columns, and every other call finds the row by its storage key
// alone.
func TestTenantScope(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		e := newEnv(t, d)
		s, ctx, key := e.store, ctxT(t), storageKey()
		r := claimReq(key)
		r.Tenant, r.Scope = "acme", "invoices"
		res, err := s.Claim(ctx, r)
		require.NoError(t, err)
		assert.Equal(t, storekit.Claimed, res.Outcome)
		var tenant, scope string
		require.NoError(t, e.db.QueryRowContext(ctx, "SELECT tenant, scope FROM "+e.table+" WHERE key_hash = "+
			map[sqlstore.Dialect]string{sqlstore.Postgres: "$1", sqlstore.MySQL: "?"}[d], key).Scan(&tenant, &scope))
		assert.Equal(t, "acme", tenant)
		assert.Equal(t, "invoices", scope)
		require.NoError(t, s.Heartbeat(ctx, key, r.Nonce, time.Minute))
		_, err = s.Get(ctx, key)
		require.NoError(t, err)
		require.NoError(t, s.Delete(ctx, key))
		_, err = s.Get(ctx, key)
		assert.ErrorIs(t, err, storekit.ErrNotFound)
		bad := claimReq(storageKey())
		bad.Tenant = "acme "
		_, err = s.Claim(ctx, bad)
		assert.Error(t, err, "a tenant MySQL would compare inexactly")
	})
}

// TestStoredTakeover: a claim keeps its owner's takeover threshold, and a
// later caller with a shorter one cannot take the claim over before the
// stored threshold has passed. A claim and a takeover return the record
// exactly as written, times included (on MySQL they come back through
// LAST_INSERT_ID).
func TestStoredTakeover(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		e := newEnv(t, d)
		s, ctx, key := e.store, ctxT(t), storageKey()
		owner := claimReq(key)
		owner.TakeoverAfter = time.Hour
		owner.LeaseTTL = 2 * time.Hour
		res, err := s.Claim(ctx, owner)
		require.NoError(t, err)
		require.Equal(t, storekit.Claimed, res.Outcome)
		assert.Equal(t, time.Hour.Milliseconds(), res.Record.TakeoverMs)
		got, err := s.Get(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, time.Hour.Milliseconds(), got.TakeoverMs)
		assert.Equal(t, got, res.Record, "the claim returns the times it wrote (the database's)")
		age(t, e, key, time.Minute)
		other := claimReq(key)
		other.TakeoverAfter = time.Second
		res, err = s.Claim(ctx, other)
		require.NoError(t, err)
		assert.Equal(t, storekit.Existing, res.Outcome, "judged by the owner's stored threshold")
		age(t, e, key, time.Hour)
		res, err = s.Claim(ctx, other)
		require.NoError(t, err)
		assert.Equal(t, storekit.TookOver, res.Outcome)
		assert.Equal(t, time.Second.Milliseconds(), res.Record.TakeoverMs, "the new owner's threshold")
		got, err = s.Get(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, got, res.Record, "the takeover returns the times it wrote (the database's)")
	})
}

// TestCorruptRows: every kind of damage is a *storekit.CorruptRecordError, on
// Get and on Claim (also when the row has expired: a claim never
// overwrites a row it cannot read), and Delete clears it.
func TestCorruptRows(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		e := newEnv(t, d)
		ctx := ctxT(t)
		for _, set := range []string{
			"record_version = 2",
			"status = 'done'",
			"attempt_count = 0",
			"claim_nonce = ''",
			"status = 'failed', error_message = NULL",
			"error_type = 'x'",
			"record_version = 9, expires_at = 0",
			"status = 'unknown', expires_at = 0",
			"status = 'failed', error_message = NULL, expires_at = 0",
			"error_type = 'x', expires_at = 0",
		} {
			key := storageKey()
			_, err := e.store.Claim(ctx, claimReq(key))
			require.NoError(t, err)
			corrupt(t, e, key, set)
			_, err = e.store.Get(ctx, key)
			var ce *storekit.CorruptRecordError
			if !strings.Contains(set, "expires_at = 0") {
				require.True(t, errors.As(err, &ce), "%s: Get: %v", set, err)
				assert.Equal(t, key, ce.Key)
			}
			_, err = e.store.Claim(ctx, claimReq(key))
			assert.ErrorIs(t, err, storekit.ErrCorruptRecord, "%s: Claim", set)
			require.NoError(t, e.store.Delete(ctx, key))
			res, err := e.store.Claim(ctx, claimReq(key))
			require.NoError(t, err)
			assert.Equal(t, storekit.Claimed, res.Outcome)
		}
	})
}

// TestConcurrentFreshClaims: many claims race on fresh keys, the case
// where PostgreSQL's statement snapshot misses a row inserted concurrently
// and the claim is sent again. Exactly one claim per key wins and every
// other caller sees the winner's record.
func TestConcurrentFreshClaims(t *testing.T) {
	forEachClaim(t, func(t *testing.T, _ string, d sqlstore.Dialect, use func(*sqlstore.Store)) {
		e := newEnv(t, d)
		use(e.store)
		ctx := ctxT(t)
		const keys, callers = 60, 16
		for range keys {
			key := storageKey()
			var (
				mu      sync.Mutex
				winners []string
				seen    []string
				wg      sync.WaitGroup
			)
			start := make(chan struct{})
			for range callers {
				wg.Go(func() {
					<-start
					r := claimReq(key)
					r.TakeoverAfter = time.Minute
					res, err := e.store.Claim(ctx, r)
					if !assert.NoError(t, err) {
						return
					}
					mu.Lock()
					defer mu.Unlock()
					if res.Outcome == storekit.Claimed {
						winners = append(winners, r.Nonce)
					}
					seen = append(seen, res.Record.Nonce)
				})
			}
			close(start)
			wg.Wait()
			require.Len(t, winners, 1, "key %s", key)
			for _, n := range seen {
				require.Equal(t, winners[0], n)
			}
		}
		t.Logf("%d keys x %d callers: one winner each; %d claims sent again after a race",
			keys, callers, sqlstore.Resent(e.store))
	})
}

// TestStoreErrorsWrapped: a database failure reaches the caller as an
// *storekit.StoreError naming the operation, wrapping the driver's error; a
// missing table is reported, not mistaken for a missing record.
func TestStoreErrorsWrapped(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		db := openDB(t, d, dsn(t, d), nil)
		s, err := sqlstore.New(db, d, sqlstore.WithTable("idem_missing_"+randHex(4)))
		require.NoError(t, err)
		ctx := ctxT(t)
		_, err = s.Get(ctx, storageKey())
		var se *storekit.StoreError
		require.True(t, errors.As(err, &se), "missing table: %v", err)
		assert.Equal(t, "get", se.Op)
		assert.NotErrorIs(t, err, storekit.ErrNotFound)
		_, err = s.Claim(ctx, claimReq(storageKey()))
		require.True(t, errors.As(err, &se), "%v", err)
		assert.Equal(t, "claim", se.Op)
		_, err = s.Purge(ctx)
		require.True(t, errors.As(err, &se), "%v", err)

		require.NoError(t, db.Close())
		e := newEnv(t, d)
		s2, err := sqlstore.New(db, d, sqlstore.WithTable(e.table))
		require.NoError(t, err)
		err = s2.Complete(ctx, storageKey(), "n", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Hour})
		require.True(t, errors.As(err, &se), "closed db: %v", err)
		assert.Equal(t, "complete", se.Op)
		assert.ErrorContains(t, err, "database is closed")
	})
}

// A completion the database refuses for its values (an error type over
// MySQL's TEXT column, a message that is not valid UTF-8, a NUL byte in
// PostgreSQL text) is a permanent failure: sending it again cannot help,
// so the Guard reports it at once instead of retrying. Transient failures
// (a missing table, a closed pool) are not.
func TestRefusedValuesArePermanent(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		e := newEnv(t, d)
		ctx := ctxT(t)
		failed := func(msg, typ string) storekit.Completion {
			return storekit.Completion{Status: storekit.StatusFailed, Error: &storekit.RecordedFailure{Message: msg, Type: typ}, TTL: time.Hour}
		}
		cases := map[string]storekit.Completion{"invalid UTF-8": failed("bad \xff byte", "t")}
		if d == sqlstore.MySQL {
			cases["type too long"] = failed("m", strings.Repeat("x", 1<<16))
		} else {
			cases["NUL byte"] = failed("nul \x00 byte", "t")
		}
		for name, c := range cases {
			key := storageKey()
			req := claimReq(key)
			_, err := e.store.Claim(ctx, req)
			require.NoError(t, err)
			err = e.store.Complete(ctx, key, req.Nonce, c)
			var se *storekit.StoreError
			require.True(t, errors.As(err, &se), "%s: %v", name, err)
			assert.ErrorIs(t, err, storekit.ErrPermanent, name)
			rec, err := e.store.Get(ctx, key)
			require.NoError(t, err)
			assert.Equal(t, storekit.StatusInProgress, rec.Status, name)
		}

		s, err := sqlstore.New(e.db, d, sqlstore.WithTable("idem_missing_"+randHex(4)))
		require.NoError(t, err)
		err = s.Complete(ctx, storageKey(), "n", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Hour})
		require.Error(t, err)
		assert.NotErrorIs(t, err, storekit.ErrPermanent, "missing table")
	})
}

// A statement being prepared on an unreachable database (here, every dial
// hangs until its context ends) does not hold up other calls: each gives
// up at its own deadline.
func TestPrepareDoesNotHoldUpOtherCalls(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		var db *sql.DB
		hang := func(ctx context.Context, _, _ string) (net.Conn, error) {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		switch d {
		case sqlstore.Postgres:
			cfg, err := pgx.ParseConfig(dsn(t, d))
			require.NoError(t, err)
			cfg.DialFunc = hang
			db = stdlib.OpenDB(*cfg)
		default:
			cfg, err := mysql.ParseDSN(dsn(t, d))
			require.NoError(t, err)
			cfg.DialFunc = hang
			conn, err := mysql.NewConnector(cfg)
			require.NoError(t, err)
			db = sql.OpenDB(conn)
		}
		t.Cleanup(func() { _ = db.Close() })
		s, err := sqlstore.New(db, d)
		require.NoError(t, err)

		slow, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			_, _ = s.Get(slow, storageKey())
		}()
		time.Sleep(100 * time.Millisecond) // the Get is preparing
		fast, cancelFast := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancelFast()
		start := time.Now()
		err = s.Heartbeat(fast, storageKey(), "n", time.Minute)
		assert.Error(t, err)
		assert.Less(t, time.Since(start), 2*time.Second, "heartbeat waited for another call's preparation")
		cancel()
		<-done
	})
}

// TestNoTable: a Guard on a store whose table was never created says so,
// and says what to do: an error matching sqlstore.ErrNoTable, in an
// *storekit.StoreError, whose text names Migrate. Before, the caller got the
// driver's "relation ... does not exist (SQLSTATE 42P01)" or MySQL's 1146.
func TestNoTable(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		s, err := sqlstore.New(sharedDB(t, d), d, sqlstore.WithTable("idem_none_"+randHex(6)))
		require.NoError(t, err)
		g := newGuard[int](t, s)
		ran := false
		_, err = g.Do(ctxT(t), "k", func(context.Context) (int, error) { ran = true; return 1, nil })
		require.Error(t, err)
		assert.False(t, ran)
		assert.ErrorIs(t, err, sqlstore.ErrNoTable)
		var se *storekit.StoreError
		assert.ErrorAs(t, err, &se)
		assert.Contains(t, err.Error(), "call Store.Migrate")
		_, err = s.Get(ctxT(t), storageKey())
		assert.ErrorIs(t, err, sqlstore.ErrNoTable)
	})
}

// TestNoSchema: Migrate of a table in a schema (a MySQL database) that
// does not exist is an error matching sqlstore.ErrNoSchema: Migrate
// creates tables, not schemas.
func TestNoSchema(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		s, err := sqlstore.New(sharedDB(t, d), d, sqlstore.WithTable("idem_none_"+randHex(6)+".records"))
		require.NoError(t, err)
		err = s.Migrate(ctxT(t))
		require.ErrorIs(t, err, sqlstore.ErrNoSchema)
		assert.NotErrorIs(t, err, sqlstore.ErrNoTable)
	})
	t.Run("sqlite", func(t *testing.T) {
		db := openSQLite(t, "file:"+filepath.Join(t.TempDir(), "x.db")+"?"+sqlstore.SQLiteDSNParams)
		defer db.Close()
		s, err := sqlstore.New(db, sqlstore.SQLite, sqlstore.WithTable("idem_none.records"), sqlstore.WithoutCleanup())
		require.NoError(t, err)
		require.ErrorIs(t, s.Migrate(ctxT(t)), sqlstore.ErrNoSchema)
	})
}

// TestStmtCloseDoesNotBlock: a call that lost a race to prepare a
// statement closes its copy, and closing waits for the connection it was
// prepared on; when that connection is busy (here in a lock wait, as a
// one-commit transaction's or a Wait's may be) the call still gets the
// cached statement at once, and the store's lock stays free (closing it
// under the lock held every other call's statement lookup, the holder of
// that connection's included, until the wait ended).
func TestStmtCloseDoesNotBlock(t *testing.T) {
	db := openDB(t, sqlstore.Postgres, dsn(t, sqlstore.Postgres), nil)
	t.Cleanup(func() { _ = db.Close() })
	db.SetMaxOpenConns(1)
	e := newEnvOn(t, sqlstore.Postgres, db, nil)
	ctx := ctxT(t)
	require.NoError(t, sqlstore.PrepareClaim(ctx, e.store))
	loser, err := db.PrepareContext(ctx, "SELECT 1") // on the pool's one connection
	require.NoError(t, err)

	other := sharedDB(t, sqlstore.Postgres)
	lockKey := rand.Int64()
	hold, err := other.Conn(ctx)
	require.NoError(t, err)
	defer hold.Close()
	_, err = hold.ExecContext(ctx, "SELECT pg_advisory_lock($1)", lockKey)
	require.NoError(t, err)
	busy, err := db.Conn(ctx)
	require.NoError(t, err)
	waited := make(chan error, 1)
	go func() { // the pool's one connection waits for the lock
		_, err := busy.ExecContext(ctx, "SELECT pg_advisory_lock($1)", lockKey)
		waited <- err
	}()
	require.Eventually(t, func() bool {
		var n int
		_ = other.QueryRowContext(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objid = ($1::bigint & 4294967295)::oid", lockKey).Scan(&n)
		return n == 1
	}, 10*time.Second, 10*time.Millisecond, "the connection waits for the lock")

	type kept struct {
		st   *sql.Stmt
		free bool
	}
	got := make(chan kept, 1)
	go func() {
		st, free := sqlstore.KeepClaim(e.store, loser)
		got <- kept{st, free}
	}()
	select {
	case k := <-got:
		assert.NotSame(t, loser, k.st, "the cached statement")
		assert.True(t, k.free, "the store's lock is free")
	case <-time.After(10 * time.Second):
		t.Error("handing the cache a statement prepared twice waited for the busy connection")
	}
	_, err = hold.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", lockKey)
	require.NoError(t, err)
	require.NoError(t, <-waited)
	_, _ = busy.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", lockKey)
	require.NoError(t, busy.Close())
}
