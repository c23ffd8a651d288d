package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/sqlstore"
)

// holdProxy forwards TCP between clients and a server. While armed, the
// next request a client sends (on whichever connection) is held for hold
// and then delivered, with whatever follows it on that connection queued
// behind: a request delayed by the network, not lost. It is delivered
// even when the client has given up on it and closed the connection.
type holdProxy struct {
	armed     atomic.Bool
	hold      time.Duration
	delivered atomic.Int64 // Unix ns when the held request was delivered

	ln     net.Listener
	target string
	wg     sync.WaitGroup
}

func newHoldProxy(t testing.TB, target string, hold time.Duration) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &holdProxy{ln: ln, target: target, hold: hold}
	t.Cleanup(func() { _ = ln.Close(); p.wg.Wait() })
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() { defer p.wg.Done(); p.serve(c) }()
		}
	}()
	return p
}

func (p *holdProxy) serve(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, err := s.Read(buf)
			if n > 0 {
				_, _ = c.Write(buf[:n])
			}
			if err != nil {
				_ = c.Close()
				return
			}
		}
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			if p.armed.CompareAndSwap(true, false) {
				time.Sleep(p.hold)
				p.delivered.Store(time.Now().UnixNano())
			}
			if _, werr := s.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			// Let the server answer what was delivered before the close.
			time.Sleep(100 * time.Millisecond)
			return
		}
	}
}

func (p *holdProxy) dial(ctx context.Context, _, _ string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", p.ln.Addr().String())
}

// heldDB opens a pool for d through a holdProxy.
func heldDB(t *testing.T, d sqlstore.Dialect, hold time.Duration) (*sql.DB, *holdProxy) {
	t.Helper()
	if d == sqlstore.Postgres {
		cfg, err := pgx.ParseConfig(dsn(t, d))
		require.NoError(t, err)
		p := newHoldProxy(t, fmt.Sprintf("%s:%d", cfg.Host, cfg.Port), hold)
		cfg.DialFunc = p.dial
		db := stdlib.OpenDB(*cfg)
		t.Cleanup(func() { _ = db.Close() })
		return db, p
	}
	cfg, err := mysql.ParseDSN(dsn(t, d))
	require.NoError(t, err)
	p := newHoldProxy(t, cfg.Addr, hold)
	cfg.DialFunc = p.dial
	conn, err := mysql.NewConnector(cfg)
	require.NoError(t, err)
	db := sql.OpenDB(conn)
	t.Cleanup(func() { _ = db.Close() })
	return db, p
}

// TestHeldCompletionNotRecordedOnlyWhenTrue: the completion request is
// held by the network for the takeover threshold plus 300ms and then
// delivered, after the Guard gave up waiting for it. Whatever the Guard
// answers, it must not be idem.ErrNotRecorded while the record ends
// completed: a caller told "not recorded" may run the side effect again
// under another key. Before idem fenced off a late completion (a claim
// with a new nonce) before answering, the Guard read the record back in
// progress, answered ErrNotRecorded, and the held completion then landed.
func TestHeldCompletionNotRecordedOnlyWhenTrue(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		const takeover = time.Second
		db, proxy := heldDB(t, d, takeover+300*time.Millisecond)
		e := newEnvOn(t, d, db, nil)
		g := newGuard[int](t, e.store, idem.WithTakeoverAfter(takeover), idem.WithHeartbeat(takeover/2))
		ctx := ctxT(t)
		if _, err := g.Do(ctx, "warm", func(context.Context) (int, error) { return 0, nil }); err != nil {
			t.Fatal(err) // statements prepared
		}
		var runs atomic.Int32
		v, err := g.Do(ctx, "held", func(context.Context) (int, error) {
			runs.Add(1)
			proxy.armed.Store(true) // the next request, the completion, is held
			return 7, nil
		})
		returned := time.Now()
		t.Logf("Do: %d, %v", v, err)
		// Let the held request land, then look at the record.
		for proxy.delivered.Load() == 0 && time.Since(returned) < 30*time.Second {
			time.Sleep(10 * time.Millisecond)
		}
		require.NotZero(t, proxy.delivered.Load(), "the completion was held and delivered")
		time.Sleep(500 * time.Millisecond)
		t.Logf("held completion delivered %v after Do returned", time.Unix(0, proxy.delivered.Load()).Sub(returned))
		rec, gerr := e.store.Get(ctx, storageKeyOf(t, e, "held"))
		require.NoError(t, gerr)
		if rec.Status == idem.StatusCompleted {
			assert.False(t, errors.Is(err, idem.ErrNotRecorded),
				"told ErrNotRecorded (%v) while the record ended completed", err)
		}
		if err == nil {
			assert.Equal(t, 7, v)
			assert.Equal(t, idem.StatusCompleted, rec.Status)
		}
		v2, err2 := g.Do(ctx, "held", func(context.Context) (int, error) { runs.Add(1); return 8, nil })
		if rec.Status == idem.StatusCompleted {
			assert.NoError(t, err2)
			assert.Equal(t, 7, v2)
			assert.EqualValues(t, 1, runs.Load())
		}
	})
}

// storageKeyOf finds the storage key of the only row besides "warm"'s:
// the table holds two rows, and the test knows which call it made last.
func storageKeyOf(t *testing.T, e *env, _ string) string {
	t.Helper()
	var key string
	require.NoError(t, e.db.QueryRow("SELECT key_hash FROM "+e.table+" ORDER BY started_at DESC LIMIT 1").Scan(&key))
	return key
}
