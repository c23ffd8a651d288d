package sqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/sqlstore"
)

// TestLostPresenceSession: the presence session of a live process is
// ended from outside (pg_terminate_backend, KILL) while its fn runs.
// Another process (a store over a pool of its own, with its own token)
// takes the claim over at once although the threshold is 30 s; the old
// owner's fn context is cancelled by its heartbeat (ErrLostOwnership), its
// completion is refused, and its fencing token was lower. The old owner's
// presence takes its lock again.
func TestLostPresenceSession(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		defer sqlstore.SetPresenceCheck(100 * time.Millisecond)()
		e := newEnv(t, d)
		storeOn := func() *sqlstore.Store {
			db := openDB(t, d, dsn(t, d), nil)
			t.Cleanup(func() { _ = db.Close() })
			s, err := sqlstore.New(db, d, sqlstore.WithTable(e.table))
			require.NoError(t, err)
			return s
		}
		a, b := storeOn(), storeOn()
		require.NotEmpty(t, a.Owner())
		require.NotEqual(t, a.Owner(), b.Owner())
		ga := newGuard[int](t, a, idem.WithHeartbeat(100*time.Millisecond))
		gb := newGuard[int](t, b)
		ctx := ctxT(t)

		started := make(chan int64)
		cause := make(chan error, 1)
		doneA := make(chan error, 1)
		go func() {
			_, err := ga.Do(ctx, "k", func(ctx context.Context) (int, error) {
				tok, _ := idem.FencingToken(ctx)
				started <- tok
				<-ctx.Done()
				cause <- context.Cause(ctx)
				return 1, nil
			})
			doneA <- err
		}()
		tokA := <-started
		_, err := gb.Do(ctx, "k", func(context.Context) (int, error) { return 0, nil })
		require.ErrorIs(t, err, idem.ErrInProgress, "the owner's presence is held")

		pid := sqlstore.PresenceSession(a)
		require.NotZero(t, pid)
		kill := "SELECT pg_terminate_backend($1)"
		if d == sqlstore.MySQL {
			kill = fmt.Sprintf("KILL %d", pid)
		}
		_, err = e.db.ExecContext(ctx, kill, pgArgs(d, pid)...)
		require.NoError(t, err)
		lost := time.Now()
		// pg_terminate_backend signals the session and returns; it ends
		// (and its lock goes) a moment later.
		var tokB int64
		var v int
		for {
			v, err = gb.Do(ctx, "k", func(ctx context.Context) (int, error) {
				tokB, _ = idem.FencingToken(ctx)
				return 2, nil
			})
			if !errors.Is(err, idem.ErrInProgress) || time.Since(lost) > 5*time.Second {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		require.NoError(t, err, "taken over at once: the owner's session is gone")
		assert.Equal(t, 2, v)
		t.Logf("taken over %v after the presence session was ended (threshold 30 s)", time.Since(lost))
		assert.Less(t, tokA, tokB, "fencing tokens")
		select {
		case c := <-cause:
			assert.ErrorIs(t, c, storekit.ErrLostOwnership, "the old owner's context is cancelled by its heartbeat")
		case <-time.After(10 * time.Second):
			t.Fatal("the old owner's fn context was not cancelled")
		}
		errA := <-doneA
		assert.True(t, errors.Is(errA, storekit.ErrLostOwnership) || errors.Is(errA, idem.ErrLostOwnership), "old owner's Do: %v", errA)
		rec, err := b.Get(ctx, guardKey(t, gb, "k"))
		require.NoError(t, err)
		assert.Equal(t, b.Owner(), rec.Owner, "the completed record is the new owner's")
		assert.Eventually(t, func() bool { return sqlstore.PresenceSession(a) != pid }, 10*time.Second, 50*time.Millisecond,
			"the old owner's presence lock is taken again on another session")
		l, err := b.OwnerLiveness(ctx, a.Owner())
		require.NoError(t, err)
		assert.Equal(t, storekit.Alive, l)
	})
}

// pgArgs is pid as the argument of PostgreSQL's statement (none on MySQL).
func pgArgs(d sqlstore.Dialect, pid int64) []any {
	if d == sqlstore.MySQL {
		return nil
	}
	return []any{pid}
}

// guardKey is the storage key g gives key.
func guardKey(t *testing.T, g *idem.Guard[int], key string) string {
	sk, err := guardinfo.StorageKey(g, key)
	require.NoError(t, err)
	return sk
}

// TestOwnerGoneClaimPaths: on every claim path, a claim meeting another
// store's live in-progress claim (threshold 30 s) answers Existing while
// that store's presence session lives, and takes it over (OwnerGone,
// attempt 2, the new owner recorded) once the session is ended.
func TestOwnerGoneClaimPaths(t *testing.T) {
	forEachClaim(t, func(t *testing.T, path string, d sqlstore.Dialect, use func(*sqlstore.Store)) {
		e := newEnv(t, d)
		storeOn := func() *sqlstore.Store {
			db := openDB(t, d, dsn(t, d), nil)
			t.Cleanup(func() { _ = db.Close() })
			s, err := sqlstore.New(db, d, sqlstore.WithTable(e.table))
			require.NoError(t, err)
			use(s)
			return s
		}
		a, b := storeOn(), storeOn()
		ctx := ctxT(t)
		key := storageKey()
		req := func(s *sqlstore.Store, nonce string) storekit.ClaimRequest {
			return storekit.ClaimRequest{Key: key, Nonce: nonce, PayloadHash: "h", LeaseTTL: time.Minute,
				TakeoverAfter: 30 * time.Second, Owner: s.Owner()}
		}
		res, err := a.Claim(ctx, req(a, "na"))
		require.NoError(t, err)
		require.Equal(t, storekit.Claimed, res.Outcome)
		assert.Equal(t, a.Owner(), res.Record.Owner)
		res, err = b.Claim(ctx, req(b, "nb"))
		require.NoError(t, err)
		require.Equal(t, storekit.Existing, res.Outcome, "a live owner")
		l, err := b.OwnerLiveness(ctx, res.Record.Owner)
		require.NoError(t, err)
		assert.Equal(t, storekit.Alive, l)

		pid := sqlstore.PresenceSession(a)
		kill := "SELECT pg_terminate_backend($1)"
		if d == sqlstore.MySQL {
			kill = fmt.Sprintf("KILL %d", pid)
		}
		_, err = e.db.ExecContext(ctx, kill, pgArgs(d, pid)...)
		require.NoError(t, err)
		require.Eventually(t, func() bool {
			res, err = b.Claim(ctx, req(b, "nb"))
			require.NoError(t, err)
			return res.Outcome != storekit.Existing
		}, 5*time.Second, 10*time.Millisecond)
		assert.Equal(t, storekit.TookOver, res.Outcome)
		assert.True(t, res.OwnerGone)
		assert.EqualValues(t, 2, res.Record.Attempt)
		assert.Equal(t, b.Owner(), res.Record.Owner)
		got, err := b.Get(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, b.Owner(), got.Owner)
		assert.Equal(t, "nb", got.Nonce)
	})
}

// TestEarlierIncarnation: on every claim path and on SQLite, a live
// in-progress claim (threshold 30 s) left by an earlier incarnation of the
// claiming process's instance is taken over at once (OwnerGone); one of
// another instance, or of the same incarnation's other claim, is not.
func TestEarlierIncarnation(t *testing.T) {
	run := func(t *testing.T, s *sqlstore.Store) {
		ctx := ctxT(t)
		key := storageKey()
		tok := s.Owner()
		claim := func(nonce, owner string) storekit.ClaimResult {
			res, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: nonce, PayloadHash: "h", LeaseTTL: time.Minute,
				TakeoverAfter: 30 * time.Second, Owner: owner})
			require.NoError(t, err)
			return res
		}
		require.Equal(t, storekit.Claimed, claim("n1", storekit.FormatOwner("svc", "inc1", tok)).Outcome)
		assert.Equal(t, storekit.Existing, claim("n2", storekit.FormatOwner("svc2", "inc2", tok)).Outcome, "another instance")
		assert.Equal(t, storekit.Existing, claim("n3", storekit.FormatOwner("svc", "inc1", tok)).Outcome, "the same incarnation")
		res := claim("n4", storekit.FormatOwner("svc", "inc2", tok))
		assert.Equal(t, storekit.TookOver, res.Outcome, "an earlier incarnation")
		assert.True(t, res.OwnerGone)
		assert.Equal(t, storekit.FormatOwner("svc", "inc2", tok), res.Record.Owner)
	}
	forEachClaim(t, func(t *testing.T, path string, d sqlstore.Dialect, use func(*sqlstore.Store)) {
		e := newEnv(t, d)
		use(e.store)
		run(t, e.store)
	})
	t.Run("SQLite", func(t *testing.T) {
		s, err := sqliteStore("idem_inc_" + randHex(4))
		require.NoError(t, err)
		assert.Empty(t, s.(*sqlstore.Store).Owner(), "SQLite has no presence")
		run(t, s.(*sqlstore.Store))
	})
}

// TestPresenceRoundTrips: with a presence held, a fresh call is still two
// round trips and a replay one (the liveness check rides inside MySQL's
// claim statement, and PostgreSQL's in a second claim statement, sent only
// when a claim meets another process's live claim: TestOwnerAskedOnlyWhenMet);
// the presence costs one connection, and its check
// every presenceCheck (long here) is its only traffic. The store reads
// the Guard's calls' round trips on its other connection.
func TestPresenceRoundTrips(t *testing.T) {
	forEachClaim(t, func(t *testing.T, path string, d sqlstore.Dialect, use func(*sqlstore.Store)) {
		if path == "MySQL/two-statements" {
			t.Skip("two round trips per claim by design")
		}
		defer sqlstore.SetPresenceCheck(time.Hour)()
		e := newCountedEnv(t, d)
		e.db.SetMaxOpenConns(4)
		use(e.store)
		require.NotEmpty(t, e.store.Owner())
		e.db.SetMaxOpenConns(2) // the presence's and one more: every statement on one connection
		g := newGuard[int](t, e.store)
		ctx := ctxT(t)
		fn := func(context.Context) (int, error) { return 1, nil }
		_, err := g.Do(ctx, "warm", fn) // prepares the statements
		require.NoError(t, err)
		before := e.rt.Load()
		_, err = g.Do(ctx, "fresh", fn)
		require.NoError(t, err)
		assert.EqualValues(t, 2, e.rt.Load()-before, "fresh call")
		before = e.rt.Load()
		_, err = g.Do(ctx, "fresh", fn)
		require.NoError(t, err)
		assert.EqualValues(t, 1, e.rt.Load()-before, "replay")
	})
}

// TestOwnerAskedOnlyWhenMet: on PostgreSQL the claim statement does not
// read the lock table; a claim that meets another process's live claim
// sends a second statement, which reads the owner's presence lock and,
// when the owner is gone, takes that claim over: 2 round trips either way
// (Existing for a live owner; TookOver with OwnerGone for a gone one).
func TestOwnerAskedOnlyWhenMet(t *testing.T) {
	defer sqlstore.SetPresenceCheck(time.Hour)()
	e := newCountedEnv(t, sqlstore.Postgres)
	e.db.SetMaxOpenConns(4)
	require.NotEmpty(t, e.store.Owner())
	e.db.SetMaxOpenConns(2) // the presence's and one more
	db := openDB(t, sqlstore.Postgres, dsn(t, sqlstore.Postgres), nil)
	t.Cleanup(func() { _ = db.Close() })
	a, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithTable(e.table), sqlstore.WithoutCleanup())
	require.NoError(t, err)
	require.NotEmpty(t, a.Owner())
	ctx := ctxT(t)
	req := func(s *sqlstore.Store, key, nonce string) storekit.ClaimRequest {
		return storekit.ClaimRequest{Key: key, Nonce: nonce, PayloadHash: "h", LeaseTTL: time.Minute,
			TakeoverAfter: 30 * time.Second, Owner: s.Owner()}
	}
	warm := storageKey() // prepares both statements
	_, err = a.Claim(ctx, req(a, warm, "wa"))
	require.NoError(t, err)
	_, err = e.store.Claim(ctx, req(e.store, warm, "wb"))
	require.NoError(t, err)

	key := storageKey()
	res, err := a.Claim(ctx, req(a, key, "na"))
	require.NoError(t, err)
	require.Equal(t, storekit.Claimed, res.Outcome)
	before := e.rt.Load()
	res, err = e.store.Claim(ctx, req(e.store, key, "nb"))
	require.NoError(t, err)
	assert.Equal(t, storekit.Existing, res.Outcome, "a live owner")
	assert.EqualValues(t, 2, e.rt.Load()-before, "the claim, then the claim that may take over a gone owner's")

	_, err = db.ExecContext(ctx, "SELECT pg_terminate_backend($1)", sqlstore.PresenceSession(a))
	require.NoError(t, err)
	require.NoError(t, db.Close()) // a's presence is not taken again
	before = e.rt.Load()
	res, err = e.store.Claim(ctx, req(e.store, key, "nc"))
	require.NoError(t, err)
	assert.Equal(t, storekit.TookOver, res.Outcome, "a gone owner")
	assert.True(t, res.OwnerGone)
	assert.EqualValues(t, 2, res.Record.Attempt)
	assert.EqualValues(t, 2, e.rt.Load()-before, "the claim, then the takeover with the owner check")
}

// TestPoolerFallback: behind PgBouncer in transaction mode a session
// advisory lock does not stay with the connection that took it, and the
// store sees it (the lock's holder is not the presence connection's
// session, or another connection reaches that session): no presence,
// Owner is "", one warning, and claims fall back to the threshold. Runs
// when the pgbouncer binary is installed (Debian: apt-get install
// pgbouncer); it starts one on a free port, as the postgres user when the
// test runs as root.
func TestPoolerFallback(t *testing.T) {
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		bin = "/usr/sbin/pgbouncer"
		if _, err := os.Stat(bin); err != nil {
			if testenv.Required() {
				t.Fatal("pgbouncer is not installed (scripts/backends.sh installs it)")
			}
			t.Skip("pgbouncer is not installed (apt-get install pgbouncer)")
		}
	}
	pgDSN := dsn(t, sqlstore.Postgres)
	port := startPgBouncer(t, bin)
	db := openDB(t, sqlstore.Postgres, fmt.Sprintf("postgres://postgres@127.0.0.1:%d/test?sslmode=disable&default_query_exec_mode=simple_protocol", port), nil)
	t.Cleanup(func() { _ = db.Close() })
	var logs strings.Builder
	s, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
		sqlstore.WithoutCleanup())
	require.NoError(t, err)
	assert.Empty(t, s.Owner(), "no presence behind a pooler that does not keep sessions")
	t.Log(strings.TrimSpace(logs.String()))
	assert.Contains(t, logs.String(), "not held by the session that took it")

	direct := openDB(t, sqlstore.Postgres, pgDSN, nil)
	t.Cleanup(func() { _ = direct.Close() })
	s2, err := sqlstore.New(direct, sqlstore.Postgres, sqlstore.WithoutCleanup())
	require.NoError(t, err)
	assert.NotEmpty(t, s2.Owner(), "a direct connection keeps its session")
}

// startPgBouncer starts pgbouncer in transaction mode in front of the
// test's PostgreSQL (127.0.0.1:5432, user postgres, trust) and returns its
// port.
func startPgBouncer(t *testing.T, bin string) int {
	t.Helper()
	dir, err := os.MkdirTemp("", "idem-pgbouncer-")
	require.NoError(t, err)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := l.Addr().(*net.TCPAddr).Port
	require.NoError(t, l.Close())
	cfg := fmt.Sprintf(`[databases]
test = host=127.0.0.1 port=5432 dbname=test user=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s/users.txt
pool_mode = transaction
default_pool_size = 2
max_client_conn = 50
logfile = %s/pgbouncer.log
`, port, dir, dir)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "users.txt"), []byte(`"postgres" ""`+"\n"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "pgbouncer.ini"), []byte(cfg), 0o644))
	cmd := exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	if os.Geteuid() == 0 { // pgbouncer refuses to run as root
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skip("pgbouncer cannot run as root, and there is no postgres user")
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		require.NoError(t, os.Chown(dir, uid, gid))
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}}
	}
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.Eventually(t, func() bool {
		c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		if err == nil {
			_ = c.Close()
		}
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "pgbouncer does not listen")
	return port
}

// TestMigrateAddsOwner: Migrate adds the owner column to a table made
// before it came, and a claim then records its owner.
func TestMigrateAddsOwner(t *testing.T) {
	for _, d := range append([]sqlstore.Dialect{sqlstore.SQLite}, dialects...) {
		t.Run(d.String(), func(t *testing.T) {
			e := newEnv(t, d)
			ctx := ctxT(t)
			_, err := e.db.ExecContext(ctx, "ALTER TABLE "+e.table+" DROP COLUMN owner")
			require.NoError(t, err)
			require.NoError(t, e.store.Migrate(ctx))
			require.NoError(t, e.store.Migrate(ctx), "again")
			key := storageKey()
			_, err = e.store.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: "n", LeaseTTL: time.Minute,
				TakeoverAfter: time.Second, Owner: "svc/inc/tok"})
			require.NoError(t, err)
			rec, err := e.store.Get(ctx, key)
			require.NoError(t, err)
			assert.Equal(t, "svc/inc/tok", rec.Owner)
		})
	}
}
