package sqlstore_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/sqlstore"
)

// liveness bounds a wait for something that must happen; it is not a
// timing claim.
const liveness = 10 * time.Second

func listen(t testing.TB, s *sqlstore.Store) *sqlstore.WatchingStore {
	t.Helper()
	ws, err := s.Listen()
	require.NoError(t, err)
	return ws
}

func woken(t testing.TB, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(liveness):
		t.Fatalf("%s: watcher not woken", what)
	}
}

// TestListenRefused: Listen needs PostgreSQL through pgx.
func TestListenRefused(t *testing.T) {
	e := newEnv(t, sqlstore.MySQL)
	_, err := e.store.Listen()
	assert.ErrorIs(t, err, storekit.ErrInvalidOption)
}

// TestWatchWokenByOtherStores: a waiter on one store is woken by a
// complete, release or delete through another store on the table (another
// process, as far as the database can tell), and not by a heartbeat or a
// write to another key.
func TestWatchWokenByOtherStores(t *testing.T) {
	e := newEnv(t, sqlstore.Postgres)
	ws := listen(t, e.store)
	other, err := sqlstore.New(e.db, sqlstore.Postgres, sqlstore.WithTable(e.table))
	require.NoError(t, err)
	ctx := ctxT(t)
	for _, op := range []string{"complete", "release", "delete"} {
		r := claimReq(storageKey())
		_, err := other.Claim(ctx, r)
		require.NoError(t, err)
		ch, stop, err := ws.Watch(ctx, r.Key)
		require.NoError(t, err)
		require.NoError(t, other.Heartbeat(ctx, r.Key, r.Nonce, time.Minute))
		r2 := claimReq(storageKey())
		_, err = other.Claim(ctx, r2)
		require.NoError(t, err)
		require.NoError(t, other.Complete(ctx, r2.Key, r2.Nonce, storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Minute}))
		switch op {
		case "complete":
			require.NoError(t, other.Complete(ctx, r.Key, r.Nonce, storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Minute}))
		case "release":
			require.NoError(t, other.Release(ctx, r.Key, r.Nonce))
		case "delete":
			require.NoError(t, other.Delete(ctx, r.Key))
		}
		woken(t, ch, op)
		stop()
	}
	// The heartbeat and the other key's completion did not wake it.
	r := claimReq(storageKey())
	_, err = other.Claim(ctx, r)
	require.NoError(t, err)
	ch, stop, err := ws.Watch(ctx, r.Key)
	require.NoError(t, err)
	defer stop()
	require.NoError(t, other.Heartbeat(ctx, r.Key, r.Nonce, time.Minute))
	r2 := claimReq(storageKey())
	_, err = other.Claim(ctx, r2)
	require.NoError(t, err)
	require.NoError(t, other.Complete(ctx, r2.Key, r2.Nonce, storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Minute}))
	// Notifications arrive on the one connection in commit order: once a
	// marker key's completion, committed after both, has woken its
	// watcher, a wake from either would have been delivered already.
	marker := claimReq(storageKey())
	_, err = other.Claim(ctx, marker)
	require.NoError(t, err)
	mch, mstop, err := ws.Watch(ctx, marker.Key)
	require.NoError(t, err)
	defer mstop()
	require.NoError(t, other.Complete(ctx, marker.Key, marker.Nonce, storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Minute}))
	woken(t, mch, "marker")
	select {
	case <-ch:
		t.Fatal("woken by a heartbeat or another key's completion")
	default:
	}
}

// TestWaitWokenByPush: a Guard waiting on a key whose owner runs in
// another Guard (its own store, as in another process) returns as soon as
// the owner completes, well before its safety poll (with a 40s takeover
// threshold the poll sleeps 2.5-5s): its context allows 2s, so a waiter
// that only polled would fail.
func TestWaitWokenByPush(t *testing.T) {
	e := newEnv(t, sqlstore.Postgres)
	owner, err := sqlstore.New(e.db, sqlstore.Postgres, sqlstore.WithTable(e.table))
	require.NoError(t, err)
	opts := []idem.Option{idem.WithTakeoverAfter(40 * time.Second), idem.WithHeartbeat(10 * time.Second)}
	gOwner := newGuard[string](t, owner, opts...)
	waiting := make(chan struct{})
	var once sync.Once
	gWaiter := newGuard[string](t, listen(t, e.store), append(opts, idem.OnDuplicate(idem.Wait),
		idem.WithObserver(idem.Observer(func(_ context.Context, ev idem.Event) {
			if ev.Kind == idem.EventWait {
				once.Do(func() { close(waiting) })
			}
		})))...)
	ctx := ctxT(t)
	for i := range 3 {
		key := "push-" + randHex(4)
		started, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := gOwner.Do(ctx, key, func(context.Context) (string, error) {
				close(started)
				<-release
				return "v", nil
			})
			done <- err
		}()
		<-started
		got := make(chan error, 1)
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			v, err := gWaiter.Do(wctx, key, func(context.Context) (string, error) { return "ran", nil })
			if err == nil && v != "v" {
				err = assert.AnError
			}
			got <- err
		}()
		if i == 0 {
			<-waiting
		}
		time.Sleep(100 * time.Millisecond) // let the waiter settle into its wait
		close(release)
		require.NoError(t, <-done)
		require.NoError(t, <-got, "waiter %d woken by the completion", i)
	}
}

// TestListenReconnects: when the listening connection is killed
// (pg_terminate_backend) its waiters are woken, a new one is established,
// and completions wake waiters again.
func TestListenReconnects(t *testing.T) {
	e := newEnv(t, sqlstore.Postgres)
	ws := listen(t, e.store)
	other, err := sqlstore.New(e.db, sqlstore.Postgres, sqlstore.WithTable(e.table))
	require.NoError(t, err)
	ctx := ctxT(t)
	for round := range 2 {
		r := claimReq(storageKey())
		_, err := other.Claim(ctx, r)
		require.NoError(t, err)
		ch, stop, err := ws.Watch(ctx, r.Key)
		require.NoError(t, err)
		pid := sqlstore.ListenerPID(e.store)
		require.NotZero(t, pid)
		var killed bool
		require.NoError(t, e.db.QueryRowContext(ctx, "SELECT pg_terminate_backend($1)", int64(pid)).Scan(&killed))
		require.True(t, killed)
		woken(t, ch, "connection killed")
		stop()

		// Watch waits for the new LISTEN; a completion wakes it.
		ch, stop, err = ws.Watch(ctx, r.Key)
		require.NoError(t, err, "round %d: watch after the kill", round)
		next := sqlstore.ListenerPID(e.store)
		assert.NotZero(t, next)
		assert.NotEqual(t, pid, next, "a new listening connection")
		require.NoError(t, other.Complete(ctx, r.Key, r.Nonce, storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Minute}))
		woken(t, ch, "completion after reconnect")
		stop()
	}
	require.NoError(t, e.store.Close())
	assert.Zero(t, sqlstore.ListenerPID(e.store), "Close ends the listening connection")
}

// TestListenLongTableName: a schema-qualified table name longer than a
// PostgreSQL channel name may be gets a shortened channel, and waiters are
// still woken.
func TestListenLongTableName(t *testing.T) {
	db := sharedDB(t, sqlstore.Postgres)
	ctx := ctxT(t)
	schema := "idem_s_" + randHex(6)
	_, err := db.ExecContext(ctx, "CREATE SCHEMA "+schema)
	require.NoError(t, err)
	t.Cleanup(func() { _, _ = db.Exec("DROP SCHEMA " + schema + " CASCADE") })
	table := schema + "." + strings.Repeat("k", 48)
	s, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithTable(table))
	require.NoError(t, err)
	require.NoError(t, s.Migrate(ctx))
	t.Cleanup(func() { _ = s.Close() })
	assert.LessOrEqual(t, len(s.Channel()), 63)
	assert.NotEqual(t, table, s.Channel())
	ws := listen(t, s)
	r := claimReq(storageKey())
	_, err = s.Claim(ctx, r)
	require.NoError(t, err)
	ch, stop, err := ws.Watch(ctx, r.Key)
	require.NoError(t, err)
	defer stop()
	require.NoError(t, s.Complete(ctx, r.Key, r.Nonce, storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Minute}))
	woken(t, ch, "completion")
}

// TestCloseWakesWatchers: Close ends the listening connection and wakes
// its waiters; a Watch after Close listens again.
func TestCloseWakesWatchers(t *testing.T) {
	e := newEnv(t, sqlstore.Postgres)
	ws := listen(t, e.store)
	ctx := ctxT(t)
	ch, stop, err := ws.Watch(ctx, storageKey())
	require.NoError(t, err)
	defer stop()
	require.NoError(t, e.store.Close())
	woken(t, ch, "Close")
	r := claimReq(storageKey())
	_, err = e.store.Claim(ctx, r)
	require.NoError(t, err)
	ch, stop2, err := ws.Watch(ctx, r.Key)
	require.NoError(t, err)
	defer stop2()
	require.NoError(t, e.store.Complete(ctx, r.Key, r.Nonce, storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Minute}))
	woken(t, ch, "completion after Close")
}

// holeDialer dials connections that can be black-holed: from then on
// their writes are dropped and nothing is read from them (reads still end
// at their deadline), as behind a route that silently died.
type holeDialer struct {
	mu    sync.Mutex
	conns []*holeConn
}

type holeConn struct {
	net.Conn
	holed atomic.Bool
}

func (c *holeConn) Write(b []byte) (int, error) {
	if c.holed.Load() {
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (c *holeConn) Read(b []byte) (int, error) {
	for {
		n, err := c.Conn.Read(b)
		if !c.holed.Load() || err != nil {
			return n, err
		}
	}
}

func (h *holeDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	hc := &holeConn{Conn: c}
	h.mu.Lock()
	h.conns = append(h.conns, hc)
	h.mu.Unlock()
	return hc, nil
}

// holeAll black-holes every connection dialed so far.
func (h *holeDialer) holeAll() {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.conns {
		c.holed.Store(true)
	}
}

// TestListenSilentDrop: when the listening connection silently stops
// carrying anything (no error, no close), the health ping finds it within
// two health intervals: its waiters are woken, a new connection is
// established (an idle pooled connection that is dead as well is given up
// after one interval), and completions wake waiters again.
func TestListenSilentDrop(t *testing.T) {
	t.Cleanup(sqlstore.SetListenHealth(200 * time.Millisecond))
	cfg, err := pgx.ParseConfig(dsn(t, sqlstore.Postgres))
	require.NoError(t, err)
	hd := &holeDialer{}
	cfg.DialFunc = hd.dial
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { _ = db.Close() })
	e := newEnvOn(t, sqlstore.Postgres, db, nil)
	ws := listen(t, e.store)
	other := newEnv(t, sqlstore.Postgres) // the completions' own pool
	completer, err := sqlstore.New(other.db, sqlstore.Postgres, sqlstore.WithTable(e.table))
	require.NoError(t, err)
	ctx := ctxT(t)

	r := claimReq(storageKey())
	_, err = completer.Claim(ctx, r)
	require.NoError(t, err)
	ch, stop, err := ws.Watch(ctx, r.Key)
	require.NoError(t, err)
	pid := sqlstore.ListenerPID(e.store)
	// Leave two idle connections in the pool, to be black-holed too: the
	// listener's next connection may be one of them.
	c1, err := db.Conn(ctx)
	require.NoError(t, err)
	c2, err := db.Conn(ctx)
	require.NoError(t, err)
	require.NoError(t, c1.PingContext(ctx))
	require.NoError(t, c2.PingContext(ctx))
	require.NoError(t, c1.Close())
	require.NoError(t, c2.Close())
	hd.holeAll()
	woken(t, ch, "silent drop")
	stop()

	ch, stop, err = ws.Watch(ctx, r.Key)
	require.NoError(t, err, "watch on a new connection")
	defer stop()
	assert.NotEqual(t, pid, sqlstore.ListenerPID(e.store), "a new listening connection")
	require.NoError(t, completer.Complete(ctx, r.Key, r.Nonce, storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Minute}))
	woken(t, ch, "completion after reconnect")
}

// TestOnlyWatchedRowsNotify: a completion, release or delete notifies only
// for a row a waiter marked watched (so completions nobody waits for pay
// nothing for notifications), and the mark survives a takeover. A raw
// LISTEN on the store's channel sees exactly the watched keys.
func TestOnlyWatchedRowsNotify(t *testing.T) {
	e := newEnv(t, sqlstore.Postgres)
	ws := listen(t, e.store)
	ctx := ctxT(t)
	raw, err := pgx.Connect(ctx, dsn(t, sqlstore.Postgres))
	require.NoError(t, err)
	t.Cleanup(func() { _ = raw.Close(context.Background()) })
	_, err = raw.Exec(ctx, `LISTEN "`+e.store.Channel()+`"`)
	require.NoError(t, err)
	done := storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Minute}

	// Unwatched: complete, release, delete.
	for _, op := range []string{"complete", "release", "delete"} {
		r := claimReq(storageKey())
		_, err := e.store.Claim(ctx, r)
		require.NoError(t, err)
		switch op {
		case "complete":
			require.NoError(t, e.store.Complete(ctx, r.Key, r.Nonce, done))
		case "release":
			require.NoError(t, e.store.Release(ctx, r.Key, r.Nonce))
		default:
			require.NoError(t, e.store.Delete(ctx, r.Key))
		}
	}
	// Watched, then taken over, then completed by the new owner.
	r := claimReq(storageKey())
	r.TakeoverAfter = time.Second
	_, err = e.store.Claim(ctx, r)
	require.NoError(t, err)
	_, stop, err := ws.Watch(ctx, r.Key)
	require.NoError(t, err)
	defer stop()
	age(t, e, r.Key, time.Minute)
	r2 := claimReq(r.Key)
	res, err := e.store.Claim(ctx, r2)
	require.NoError(t, err)
	require.Equal(t, storekit.TookOver, res.Outcome)
	require.NoError(t, e.store.Complete(ctx, r.Key, r2.Nonce, done))

	// Notifications arrive in commit order: the first is the watched key's.
	nctx, cancel := context.WithTimeout(ctx, liveness)
	defer cancel()
	n, err := raw.WaitForNotification(nctx)
	require.NoError(t, err)
	assert.Equal(t, r.Key, n.Payload, "only the watched row notifies")
}

// TestWaitRacingCompletion: waiters (each with its own store and listening
// connection, as in other processes) start while the owner completes, at
// random moments around their Watch. None misses the completion: each
// returns the result within a context of 2s, shorter than its safety poll
// (2.5-5s with a 40s takeover threshold), so a missed wake-up fails it.
func TestWaitRacingCompletion(t *testing.T) {
	e := newEnv(t, sqlstore.Postgres)
	opts := []idem.Option{idem.WithTakeoverAfter(40 * time.Second), idem.WithHeartbeat(10 * time.Second)}
	gOwner := newGuard[string](t, e.store, opts...)
	const waiters = 4
	gs := make([]*idem.Guard[string], waiters)
	for i := range gs {
		s, err := sqlstore.New(e.db, sqlstore.Postgres, sqlstore.WithTable(e.table))
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		gs[i] = newGuard[string](t, listen(t, s), append(opts, idem.OnDuplicate(idem.Wait))...)
	}
	ctx := ctxT(t)
	for round := range 20 {
		key := "race-" + randHex(4)
		started, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := gOwner.Do(ctx, key, func(context.Context) (string, error) {
				close(started)
				<-release
				return "v", nil
			})
			done <- err
		}()
		<-started
		var wg sync.WaitGroup
		for _, g := range gs {
			wg.Go(func() {
				wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
				defer cancel()
				v, err := g.Do(wctx, key, func(context.Context) (string, error) { return "ran", nil })
				assert.NoError(t, err, "round %d", round)
				assert.Equal(t, "v", v, "round %d", round)
			})
		}
		time.Sleep(time.Duration(round%5) * time.Millisecond)
		close(release)
		require.NoError(t, <-done)
		wg.Wait()
	}
}

// TestCloseNotHeldByListener: closing a store whose statements were
// prepared on a connection that another store on the same *sql.DB now
// listens on does not wait for that listener (database/sql locks a
// connection while the listener reads from it; the listener lets go
// every 100ms). With a one-minute health interval, a listener that held
// on would keep Close waiting far past the liveness bound.
func TestCloseNotHeldByListener(t *testing.T) {
	t.Cleanup(sqlstore.SetListenHealth(time.Minute))
	db := openDB(t, sqlstore.Postgres, dsn(t, sqlstore.Postgres), nil)
	db.SetMaxOpenConns(1) // every statement is prepared on the one connection
	t.Cleanup(func() { _ = db.Close() })
	e := newEnvOn(t, sqlstore.Postgres, db, nil)
	ctx := ctxT(t)
	a, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithTable(e.table))
	require.NoError(t, err)
	r := claimReq(storageKey())
	_, err = a.Claim(ctx, r)
	require.NoError(t, err)
	db.SetMaxOpenConns(2) // room for a's Close; the listener takes the used one
	_, stop, err := listen(t, e.store).Watch(ctx, r.Key)
	require.NoError(t, err)
	defer stop()
	closed := make(chan error, 1)
	go func() { closed <- a.Close() }()
	select {
	case err := <-closed:
		require.NoError(t, err)
	case <-time.After(liveness):
		t.Fatal("Close held by the listening connection")
	}
}
