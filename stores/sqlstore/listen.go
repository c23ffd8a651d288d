package sqlstore

import (
	"context"
	"database/sql/driver"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/idem-go/idem/storekit"
)

// WatchingStore is a Store that also implements storekit.Watcher, with
// PostgreSQL LISTEN/NOTIFY. Make one with Store.Listen and hand it to
// idem.New; everything else is the Store's.
type WatchingStore struct {
	*Store
}

var _ storekit.Watcher = (*WatchingStore)(nil)

// listenHealth is how long the listening connection may be silent before
// it is pinged, and how long the ping (or setting up a connection) may
// take: a connection that died without a word, behind a dropped route, is
// found this way. A variable so that tests can shorten it.
var listenHealth = 15 * time.Second

// Timing of the listening connection.
const (
	// watchTimeout bounds how long Watch waits for the LISTEN to be in
	// place (after a drop, while the connection is re-established).
	watchTimeout = 5 * time.Second
	// Backoff between attempts to re-establish the listening connection.
	listenRetryMin = 10 * time.Millisecond
	listenRetryMax = time.Second
)

const pgxStdlibPkg = "github.com/jackc/pgx/v5/stdlib"

// Listen returns s as a WatchingStore, whose Watch wakes waiters when the
// record for a key is completed, released or deleted through any store on
// the same table, in any process. It needs PostgreSQL through pgx's
// database/sql driver (github.com/jackc/pgx/v5/stdlib, by sql.Open("pgx",
// ...) or stdlib.OpenDB); otherwise it returns an *storekit.OptionError matching
// storekit.ErrInvalidOption. It does no I/O: the first Watch takes one
// connection from the store's *sql.DB for good (it counts against
// SetMaxOpenConns) and sends LISTEN on it. Every WatchingStore of s shares
// that one connection. Close releases it.
func (s *Store) Listen() (*WatchingStore, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if s.dialect != Postgres {
		return nil, &storekit.OptionError{Option: "sqlstore.Listen", Reason: "LISTEN/NOTIFY needs PostgreSQL"}
	}
	if !pgxDriver(s.db.Driver()) {
		return nil, &storekit.OptionError{Option: "sqlstore.Listen",
			Reason: fmt.Sprintf("driver %T is not pgx's database/sql driver (%s)", s.db.Driver(), pgxStdlibPkg)}
	}
	return &WatchingStore{Store: s}, nil
}

// pgxDriver reports whether d is pgx's database/sql driver, recognised by
// its package so that the store does not link pgx.
func pgxDriver(d driver.Driver) bool {
	t := reflect.TypeOf(d)
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t != nil && t.PkgPath() == pgxStdlibPkg
}

// Channel returns the PostgreSQL channel the store's Complete, Release and
// Delete notify on, with the storage key as the payload: the table name,
// or, when that is longer than 63 bytes, a shortened name with a hash.
func (s *Store) Channel() string { return notifyChannel(s.cfg.table) }

// Watch implements storekit.Watcher. The returned channel is closed when the
// record for key may have changed after Watch returned: a complete,
// release or delete of key was committed, the listening connection was
// lost (notifications may have been missed; it is re-established), or the
// store was closed. Claims, takeovers and heartbeats do not notify, and
// neither does a crashed owner: the Guard's safety poll finds a stale claim.
// Watch returns once the LISTEN is in place and the key's row is marked
// watched (one UPDATE; only a watched row's changes notify), so no change
// committed after it returns is missed; it fails if the listening
// connection cannot be established within 5s (the Guard then polls). stop
// ends the watch, and may be called more than once; the end of ctx ends it
// too (the channel is then never closed). The watches of the process are
// kept in a storekit.Watchers.
func (w *WatchingStore) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := w.checkKey("watch", key); err != nil {
		return nil, nil, err
	}
	l := w.listener()
	// Registered first, the state read after: a loss between the two
	// wakes the watch, so it never waits on a LISTEN that is gone.
	changed, stop, err := l.watch.Watch(ctx, key)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlstore: watch %s: %w", key, err)
	}
	ready, err := l.state()
	if err != nil {
		stop()
		return nil, nil, fmt.Errorf("sqlstore: watch %s: %w", key, err)
	}
	timer := time.NewTimer(watchTimeout)
	defer timer.Stop()
	select {
	case <-ready:
		// Mark the row watched, so that its completion notifies: one
		// round trip, on the waiter's side only.
		if _, err := w.exec(ctx, stWatch, key); err != nil {
			stop()
			return nil, nil, storeErr("watch", err)
		}
		return changed, stop, nil
	case <-changed:
		select {
		case <-ready: // in place, then lost: a spurious wake is safe
			return changed, stop, nil
		default:
		}
		stop()
		if err := l.failure(); err != nil {
			return nil, nil, fmt.Errorf("sqlstore: watch %s: %w", key, err)
		}
		return nil, nil, fmt.Errorf("sqlstore: watch %s: listening connection lost", key)
	case <-ctx.Done():
		stop()
		return nil, nil, fmt.Errorf("sqlstore: watch %s: %w", key, context.Cause(ctx))
	case <-timer.C:
		stop()
		return nil, nil, fmt.Errorf("sqlstore: watch %s: LISTEN not in place within %v", key, watchTimeout)
	}
}

// listener returns the store's listener, starting it on first use (and
// again after Close).
func (s *Store) listener() *listener {
	s.lmu.Lock()
	defer s.lmu.Unlock()
	if s.lis == nil {
		ctx, cancel := context.WithCancel(context.Background())
		s.lis = &listener{s: s, ctx: ctx, cancel: cancel, done: make(chan struct{}), ready: make(chan struct{})}
		go s.lis.run()
	}
	return s.lis
}

// stopListener ends the listening connection, if any, and wakes its
// waiters.
func (s *Store) stopListener() {
	s.lmu.Lock()
	l := s.lis
	s.lis = nil
	s.lmu.Unlock()
	if l != nil {
		l.close()
	}
}

// errListenClosed is what a Watch racing with Close gets.
var errListenClosed = errors.New("sqlstore: store closed")

// listener is a store's one listening connection, multiplexing every
// watched key of the table over one LISTEN.
type listener struct {
	s      *Store
	ctx    context.Context // ends at close
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns
	watch  storekit.Watchers

	mu       sync.Mutex
	ready    chan struct{} // closed while a LISTEN is in place
	isReady  bool
	pid      uint32 // backend process of the listening connection, 0 while none
	sessions int    // listening connections established so far
	err      error  // permanent failure (the connection is not pgx's)
	closed   bool
}

// state returns the channel that is closed once a LISTEN is in place, or
// why none will be: the listener was closed or failed for good.
func (l *listener) state() (<-chan struct{}, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.err != nil:
		return nil, l.err
	case l.closed:
		return nil, errListenClosed
	}
	return l.ready, nil
}

func (l *listener) failure() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// listening marks the LISTEN in place on the connection of backend pid.
func (l *listener) listening(pid uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pid = pid
	l.sessions++
	if !l.isReady {
		l.isReady = true
		close(l.ready)
	}
}

// lost marks the LISTEN not in place and wakes every watch
// (notifications may have been missed); err, if not nil, is permanent. The
// state changes before the wake, so a Watch that registers after the wake
// finds the LISTEN not in place, or the failure.
func (l *listener) lost(err error) {
	defer l.watch.NotifyAll()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pid = 0
	if err != nil && l.err == nil {
		l.err = err
	}
	if l.isReady {
		l.isReady = false
		l.ready = make(chan struct{})
	}
}

func (l *listener) close() {
	l.mu.Lock()
	l.closed = true
	l.mu.Unlock()
	l.cancel()
	<-l.done
	l.lost(nil)
}

// run keeps a listening connection until close, re-establishing it with
// a capped backoff after every loss.
func (l *listener) run() {
	defer close(l.done)
	backoff := listenRetryMin
	for {
		established, err := l.session()
		var perm error
		if errors.Is(err, errNotPgx) {
			perm = err
		}
		// Waiters registered while no LISTEN was in place are still
		// waiting in Watch for one: a failed attempt to set one up has
		// made them miss nothing, so only a lost session wakes them.
		if established || perm != nil {
			l.lost(perm)
		}
		if perm != nil || l.ctx.Err() != nil {
			return
		}
		if established {
			backoff = listenRetryMin
		}
		t := time.NewTimer(backoff)
		select {
		case <-l.ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		backoff = min(2*backoff, listenRetryMax)
	}
}

// session takes a connection from the pool, sends LISTEN on it and
// delivers its notifications until it fails or the listener is closed.
// The connection is never given back to the pool (it holds the LISTEN):
// it is closed.
func (l *listener) session() (established bool, err error) {
	// Setting up is bounded too: a pooled connection may be dead already.
	setup, cancel := context.WithTimeout(l.ctx, listenHealth)
	defer cancel()
	conn, err := l.s.db.Conn(setup)
	if err != nil {
		return false, err
	}
	defer func() {
		_ = conn.Raw(func(any) error { return driver.ErrBadConn }) // discard, not pool
		_ = conn.Close()
	}()
	var pid uint32
	if err := conn.QueryRowContext(setup, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
		return false, err
	}
	if _, err := conn.ExecContext(setup, `LISTEN "`+notifyChannel(l.s.cfg.table)+`"`); err != nil {
		return false, err
	}
	cancel()
	l.listening(pid)
	heard := time.Now()
	for {
		var got bool
		if err := conn.Raw(func(dc any) (err error) {
			got, err = l.receive(dc)
			return err
		}); err != nil {
			return true, err
		}
		if got {
			heard = time.Now()
			continue
		}
		if time.Since(heard) < listenHealth {
			continue
		}
		// Silent for listenHealth: make sure the connection still answers.
		ctx, cancel := context.WithTimeout(l.ctx, listenHealth)
		err := conn.PingContext(ctx)
		cancel()
		if err != nil {
			return true, err
		}
		heard = time.Now()
	}
}

// listenSlice bounds how long the listener holds its connection inside
// database/sql's Raw (which locks the connection): closing a statement
// prepared on that connection earlier, when it was an ordinary pooled
// connection (another Store's Close, on the same *sql.DB), waits for that
// lock. Between slices no notification is lost: it waits in the socket
// and is read by the next slice.
const listenSlice = 100 * time.Millisecond

// receive delivers notifications read from the pgx connection dc for one
// listenSlice; got reports whether any arrived. An error is a failed
// connection (or the listener closing).
func (l *listener) receive(dc any) (got bool, err error) {
	wait, err := notificationWaiter(dc)
	if err != nil {
		return false, err
	}
	ctx, cancel := context.WithTimeout(l.ctx, listenSlice)
	defer cancel()
	for {
		key, err := wait(ctx)
		if err != nil {
			if l.ctx.Err() == nil && errors.Is(err, context.DeadlineExceeded) {
				return got, nil // the slice is over
			}
			return got, err
		}
		got = true
		l.watch.Notify(key)
	}
}

// errNotPgx is the permanent failure of a listener whose connections do
// not look like pgx's.
var errNotPgx = errors.New("sqlstore: the driver connection is not a pgx v5 connection")

// notificationWaiter returns a function that waits for the next
// notification on the database/sql driver connection dc of pgx's stdlib
// and returns its payload: dc.Conn().WaitForNotification(ctx).Payload. The
// calls go through reflection, so that the store does not link pgx; the
// method shapes are checked first.
func notificationWaiter(dc any) (func(context.Context) (string, error), error) {
	v := reflect.ValueOf(dc)
	if !v.IsValid() {
		return nil, errNotPgx
	}
	m := v.MethodByName("Conn")
	if !m.IsValid() || m.Type().NumIn() != 0 || m.Type().NumOut() != 1 {
		return nil, errNotPgx
	}
	c := m.Call(nil)[0]
	if c.Kind() == reflect.Pointer && c.IsNil() {
		return nil, errNotPgx
	}
	w := c.MethodByName("WaitForNotification")
	if !w.IsValid() {
		return nil, errNotPgx
	}
	wt := w.Type()
	if wt.NumIn() != 1 || wt.In(0) != reflect.TypeFor[context.Context]() ||
		wt.NumOut() != 2 || wt.Out(1) != reflect.TypeFor[error]() ||
		wt.Out(0).Kind() != reflect.Pointer || wt.Out(0).Elem().Kind() != reflect.Struct {
		return nil, errNotPgx
	}
	f, ok := wt.Out(0).Elem().FieldByName("Payload")
	if !ok || f.Type.Kind() != reflect.String {
		return nil, errNotPgx
	}
	return func(ctx context.Context) (string, error) {
		out := w.Call([]reflect.Value{reflect.ValueOf(ctx)})
		if e, _ := out[1].Interface().(error); e != nil {
			return "", e
		}
		if out[0].IsNil() {
			return "", nil
		}
		return out[0].Elem().FieldByIndex(f.Index).String(), nil
	}, nil
}
