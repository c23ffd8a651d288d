package sqlstore_test

import (
	"github.com/go-sql-driver/mysql"
	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"

	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/sqlstore"
	"github.com/idem-go/idem/stores/storetest"
)

// wantTrips are the round trips on the wire per Guard call, per dialect
// (statements prepared already).
var wantTrips = map[string]struct{ fresh, replay, failLock, release, heartbeat int64 }{
	"Postgres":             {fresh: 2, replay: 1, failLock: 2, release: 2, heartbeat: 1},
	"MySQL/returning":      {fresh: 2, replay: 1, failLock: 2, release: 2, heartbeat: 1},
	"MySQL/procedure":      {fresh: 2, replay: 1, failLock: 2, release: 2, heartbeat: 1},
	"MySQL/two-statements": {fresh: 2, replay: 2, failLock: 2, release: 2, heartbeat: 1},
}

// TestRoundTrips counts store operations per Guard call with
// storetest.Instrument and request/response exchanges on the database
// connection (one connection, statements already prepared), for each
// claim path.
func TestRoundTrips(t *testing.T) {
	forEachClaim(t, func(t *testing.T, name string, d sqlstore.Dialect, use func(*sqlstore.Store)) {
		e := newCountedEnv(t, d)
		use(e.store)
		inst := storetest.Instrument(e.store)
		ctx := ctxT(t)
		g := newGuard[string](t, inst, idem.OnFailure(idem.Lock))
		gu := newGuard[string](t, inst) // OnFailure(Unlock)
		ok := func(context.Context) (string, error) { return "v", nil }
		boom := func(context.Context) (string, error) { return "", errors.New("boom") }
		// Warm up: prepare every statement on the one connection.
		for _, f := range []func(context.Context) (string, error){ok, boom} {
			key := randHex(8)
			_, _ = g.Do(ctx, key, f)
			_, _ = g.Do(ctx, key, f)
			_, _ = gu.Do(ctx, randHex(8), boom)
		}
		r := claimReq(storageKey())
		_, err := e.store.Claim(ctx, r)
		require.NoError(t, err)
		require.NoError(t, e.store.Heartbeat(ctx, r.Key, r.Nonce, time.Minute))

		measure := func(name string, wantOps int, wantRT int64, f func()) {
			t.Helper()
			inst.Reset()
			before := e.rt.Load()
			f()
			rt := e.rt.Load() - before
			assert.Equal(t, wantOps, inst.Total(), "%s: store operations", name)
			assert.Equal(t, wantRT, rt, "%s: round trips", name)
			t.Logf("%-22s %d store ops, %d round trips", name, inst.Total(), rt)
		}
		want := wantTrips[name]
		key := randHex(8)
		measure("fresh", 2, want.fresh, func() {
			v, err := g.Do(ctx, key, ok)
			require.NoError(t, err)
			require.Equal(t, "v", v)
		})
		measure("replay", 1, want.replay, func() {
			v, err := g.Do(ctx, key, ok)
			require.NoError(t, err)
			require.Equal(t, "v", v)
		})
		measure("failure (Lock)", 2, want.failLock, func() {
			_, err := g.Do(ctx, randHex(8), boom)
			require.Error(t, err)
		})
		measure("failure (Unlock)", 2, want.release, func() {
			_, err := gu.Do(ctx, randHex(8), boom)
			require.Error(t, err)
		})
		measure("heartbeat", 1, want.heartbeat, func() {
			require.NoError(t, inst.Heartbeat(ctx, r.Key, r.Nonce, time.Minute))
		})
	})
}

// TestGuardExactlyOnce: 64 goroutines, each with its own Guard (so each
// goes to the database), call the same keys in random orders; fn runs once
// per key and every caller gets its result.
func TestGuardExactlyOnce(t *testing.T) {
	forEachClaim(t, func(t *testing.T, _ string, d sqlstore.Dialect, use func(*sqlstore.Store)) {
		e := newEnv(t, d)
		use(e.store)
		ctx := ctxT(t)
		const goroutines, keys = 64, 30
		runs := make([]atomic.Int32, keys)
		var mu sync.Mutex
		results := make([]map[string]int, keys)
		for i := range results {
			results[i] = map[string]int{}
		}
		var wg sync.WaitGroup
		for gi := range goroutines {
			wg.Go(func() {
				g, err := idem.New[string](e.store, idem.OnDuplicate(idem.Wait))
				if !assert.NoError(t, err) {
					return
				}
				me := fmt.Sprint("g", gi)
				for _, k := range rand.Perm(keys) {
					v, err := g.Do(ctx, fmt.Sprint("key-", k), func(ctx context.Context) (string, error) {
						runs[k].Add(1)
						time.Sleep(time.Duration(1+rand.IntN(5)) * time.Millisecond)
						return me, nil
					})
					if !assert.NoError(t, err) {
						return
					}
					mu.Lock()
					results[k][v]++
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		for k := range keys {
			assert.Equal(t, int32(1), runs[k].Load(), "key %d: fn runs", k)
			assert.Len(t, results[k], 1, "key %d: every caller gets the one result", k)
			for _, n := range results[k] {
				assert.Equal(t, goroutines, n)
			}
		}
		t.Logf("%d keys x %d guards: fn ran once per key", keys, goroutines)
	})
}

// TestGuardTakeoverFencing: a Guard whose owner died is taken over; the
// fencing token goes up, and the old owner's late completion is refused.
func TestGuardTakeoverFencing(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		e := newEnv(t, d)
		ctx := ctxT(t)
		g := newGuard[int64](t, e.store, idem.WithTakeoverAfter(300*time.Millisecond),
			idem.WithHeartbeat(100*time.Millisecond))
		key := "fenced"
		// A crashed owner: a claim on the guard's storage key that nobody
		// heartbeats.
		sk, err := guardinfo.StorageKey(g, key)
		require.NoError(t, err)
		dead := claimReq(sk)
		dead.TakeoverAfter = 300 * time.Millisecond // its stored threshold decides
		_, err = e.store.Claim(ctx, dead)
		require.NoError(t, err)
		time.Sleep(450 * time.Millisecond)
		tok, err := g.Do(ctx, key, func(ctx context.Context) (int64, error) {
			tok, _ := idem.FencingToken(ctx)
			return tok, nil
		})
		require.NoError(t, err)
		assert.Equal(t, int64(2), tok)
		err = e.store.Complete(ctx, sk, dead.Nonce, storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Minute})
		assert.ErrorIs(t, err, storekit.ErrLostOwnership)
	})
}

// TestClaimProcedureMissing: a MySQL store without RETURNING whose claim
// procedure is missing (dropped, or a table made before it) claims in two
// statements, answering as before, and in one CALL again once Migrate has
// run; Migrate over an existing procedure succeeds.
func TestClaimProcedureMissing(t *testing.T) {
	e := newCountedEnv(t, sqlstore.MySQL)
	sqlstore.SetReturning(e.store, false)
	ctx := ctxT(t)
	r := claimReq(storageKey())
	_, err := e.store.Claim(ctx, r)
	require.NoError(t, err)
	require.NoError(t, e.store.Complete(ctx, r.Key, r.Nonce, storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("v"), TTL: time.Minute}))
	replay := func() int64 {
		t.Helper()
		before := e.rt.Load()
		res, err := e.store.Claim(ctx, claimReq(r.Key))
		require.NoError(t, err)
		require.Equal(t, storekit.Existing, res.Outcome)
		require.Equal(t, "v", string(res.Record.Result))
		return e.rt.Load() - before
	}
	replay() // statements prepared
	assert.EqualValues(t, 1, replay(), "with the procedure")
	_, err = e.db.ExecContext(ctx, "DROP PROCEDURE "+sqlstore.ClaimProcedure(e.table))
	require.NoError(t, err)
	replay() // finds it missing
	assert.EqualValues(t, 2, replay(), "without it")
	require.NoError(t, e.store.Migrate(ctx))
	require.NoError(t, e.store.Migrate(ctx))
	replay()
	assert.EqualValues(t, 1, replay(), "after Migrate")
}

// TestMigrateWithoutCreateRoutine: on an account without the CREATE
// ROUTINE privilege, Migrate creates the table, then fails with an error
// that names the procedure and the privilege; the store still claims, in
// two statements.
func TestMigrateWithoutCreateRoutine(t *testing.T) {
	ctx := ctxT(t)
	admin := sharedDB(t, sqlstore.MySQL)
	cfg, err := mysql.ParseDSN(dsn(t, sqlstore.MySQL))
	require.NoError(t, err)
	const user = "idem_noroutine" // the test database's tables only, no routines
	for _, q := range []string{
		"CREATE USER IF NOT EXISTS '" + user + "'@'%'",
		"GRANT SELECT, INSERT, UPDATE, DELETE, CREATE, INDEX, DROP ON `" + cfg.DBName + "`.* TO '" + user + "'@'%'",
	} {
		if _, err := admin.ExecContext(ctx, q); err != nil {
			t.Skipf("cannot make a restricted account (%v): the test needs a server account that can", err)
		}
	}
	cfg.User, cfg.Passwd = user, ""
	db := openDB(t, sqlstore.MySQL, cfg.FormatDSN(), nil)
	t.Cleanup(func() { _ = db.Close() })
	table := "idem_t_" + randHex(6)
	t.Cleanup(func() { dropTable(t, sqlstore.MySQL, table) })
	s, err := sqlstore.New(db, sqlstore.MySQL, sqlstore.WithTable(table))
	require.NoError(t, err)
	err = s.Migrate(ctx)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "CREATE ROUTINE")
	assert.Contains(t, err.Error(), table+"_claim_v3")
	sqlstore.SetReturning(s, false)
	r := claimReq(storageKey())
	res, err := s.Claim(ctx, r)
	require.NoError(t, err)
	assert.Equal(t, storekit.Claimed, res.Outcome)
	res, err = s.Claim(ctx, claimReq(r.Key))
	require.NoError(t, err)
	assert.Equal(t, storekit.Existing, res.Outcome)
}
