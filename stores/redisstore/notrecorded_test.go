package redisstore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/idem-go/idem/stores/storetest/testenv"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// holdProxy forwards TCP to a Redis server. Once armed, every request
// that contains match (the complete script's SHA) and arrives within hold
// of the first one is held, with everything after it on its connection,
// until hold after that first one, and then delivered to the server, even
// when the client gave up and closed the connection meanwhile: requests
// delayed by the network, not lost.
type holdProxy struct {
	ln        net.Listener
	target    string
	match     []byte
	hold      time.Duration
	armed     atomic.Bool
	mu        sync.Mutex
	until     time.Time     // end of the hold, set by the first match
	delivered chan struct{} // closed once a held request reached the server
	once      sync.Once
	wg        sync.WaitGroup
}

func newHoldProxy(t *testing.T, target string, match []byte, hold time.Duration) *holdProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &holdProxy{ln: ln, target: target, match: match, hold: hold, delivered: make(chan struct{})}
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
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	go func() { _, _ = io.Copy(c, s); _ = c.Close() }()
	buf := make([]byte, 64<<10)
	var held []byte
	var until time.Time
	for {
		n, err := c.Read(buf)
		chunk := buf[:n]
		if held == nil && n > 0 && p.armed.Load() && bytes.Contains(chunk, p.match) {
			p.mu.Lock()
			if p.until.IsZero() {
				p.until = time.Now().Add(p.hold)
			}
			if time.Now().Before(p.until) {
				held, until = []byte{}, p.until
			}
			p.mu.Unlock()
		}
		if held != nil {
			held = append(held, chunk...)
			if err == nil && time.Now().Before(until) {
				// Keep reading (the client may close), deliver later.
				_ = c.SetReadDeadline(until)
				continue
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				err = nil
			}
			time.Sleep(time.Until(until))
			_, _ = s.Write(held)
			until = time.Time{}
			_ = c.SetReadDeadline(time.Time{})
			p.once.Do(func() { close(p.delivered) })
			if err != nil {
				// The client left: let the server read what was delivered.
				time.Sleep(100 * time.Millisecond)
				_ = s.Close()
				return
			}
			held = nil
			continue
		}
		if n > 0 {
			if _, werr := s.Write(chunk); werr != nil {
				_ = c.Close()
				_ = s.Close()
				return
			}
		}
		if err != nil {
			_ = s.Close()
			return
		}
	}
}

// TestNotRecordedOnlyWhenTrue: the completion request is held by the
// network past the claim's takeover threshold (plus 300ms) and then
// delivered. Whatever the Guard answers, it never says ErrNotRecorded when
// the record ends completed, with go-redis's ContextTimeoutEnabled on (the
// request's context deadline cuts the wait) and off (the socket's read
// timeout does).
func TestNotRecordedOnlyWhenTrue(t *testing.T) {
	for _, ctxTimeout := range []bool{true, false} {
		name := "ContextTimeoutEnabled=false"
		if ctxTimeout {
			name = "ContextTimeoutEnabled=true"
		}
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			const takeover = time.Second
			p := newHoldProxy(t, testenv.RedisAddr(t), []byte(redisstore.CompleteSHA), takeover+300*time.Millisecond)
			c := redis.NewClient(&redis.Options{Addr: p.ln.Addr().String(), ContextTimeoutEnabled: ctxTimeout,
				ReadTimeout: 500 * time.Millisecond, MaxRetries: -1})
			t.Cleanup(func() { _ = c.Close() })
			s := newStore(t, c)
			require.NoError(t, s.LoadScripts(ctx))
			g, err := idem.New[string](s, idem.WithTakeoverAfter(takeover), idem.WithHeartbeat(takeover/4))
			require.NoError(t, err)

			p.armed.Store(true)
			v, err := g.Do(ctx, "k", func(context.Context) (string, error) { return "v", nil })
			t.Logf("Do = %q, %v", v, err)
			assert.Equal(t, "v", v)
			select {
			case <-p.delivered:
			case <-ctx.Done():
				t.Fatal("the held completion was never delivered")
			}
			time.Sleep(200 * time.Millisecond) // let the delivered request run
			sk, kerr := g.StorageKey("k")
			require.NoError(t, kerr)
			rc := standalone(t)
			raw, gerr := rc.Get(ctx, s.Key(sk)).Result()
			rec, rerr := s.Get(ctx, sk)
			completed := rerr == nil && rec.Status == idem.StatusCompleted
			t.Logf("record: %v %v (raw %d bytes, %v)", rec, rerr, len(raw), gerr)
			if errors.Is(err, idem.ErrNotRecorded) {
				assert.False(t, completed, "Do answered %v and the record ended completed", err)
			}
			if err == nil {
				assert.True(t, completed, "Do answered success and the record is %v %v", rec, rerr)
			}
		})
	}
}
