package redisstore_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testenv"
)

// Two Guards with 400 ms and 2 s thresholds on one key: the short one never
// takes over the live claim of the long one (the owner's threshold is
// stored with the claim).
func TestShortThresholdDoesNotStealLiveClaim(t *testing.T) {
	s := newStore(t, standalone(t))
	skipUnlessThresholdStored(t, s)
	long, err := idem.New[int](s, idem.WithTakeoverAfter(2*time.Second), idem.WithHeartbeat(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	short, err := idem.New[int](s, idem.WithTakeoverAfter(400*time.Millisecond), idem.WithHeartbeat(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	_, err = long.Do(context.Background(), "threshold", func(ctx context.Context) (int, error) {
		runs.Add(1)
		for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			_, err := short.Do(context.Background(), "threshold", func(ctx context.Context) (int, error) { runs.Add(1); return 2, nil })
			if !errors.Is(err, idem.ErrInProgress) {
				t.Errorf("short threshold: %v, want ErrInProgress", err)
				break
			}
		}
		return 1, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("fn ran %d times", n)
	}
}

// skipUnlessThresholdStored skips when the store does not yet keep the
// owner's takeover threshold with a claim (the store change that persists
// Record.TakeoverMs); once it does, the test runs.
func skipUnlessThresholdStored(t *testing.T, s idem.Store) {
	t.Helper()
	req := idem.ClaimRequest{Key: storageKey(), Nonce: randHex(16), LeaseTTL: time.Minute, TakeoverAfter: 2 * time.Second}
	if _, err := s.Claim(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	rec, err := s.Get(context.Background(), req.Key)
	if err != nil {
		t.Fatal(err)
	}
	if rec.TakeoverMs == 0 {
		t.Skip("needs the store to persist the claim's takeover threshold (Record.TakeoverMs)")
	}
}

// dropProxy forwards TCP between clients and addr; while armed, the next
// reply from the server is swallowed and that connection goes silent, as
// if the reply was lost on the way back.
type dropProxy struct {
	ln    net.Listener
	addr  string
	armed atomic.Bool
	wg    sync.WaitGroup
}

func newDropProxy(t *testing.T, addr string) *dropProxy {
	t.Helper()
	var ln net.Listener
	var err error
	for port := 7300; port < 7400; port++ { // this workstream's private range
		if ln, err = net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port)); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	p := &dropProxy{ln: ln, addr: addr}
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

func (p *dropProxy) serve(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.addr)
	if err != nil {
		return
	}
	defer s.Close()
	go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
	buf := make([]byte, 64<<10)
	silent := false
	for {
		n, err := s.Read(buf)
		if n > 0 && !silent && p.armed.CompareAndSwap(true, false) {
			silent = true // this reply, and everything after it, is lost
		}
		if n > 0 && !silent {
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// A completion Redis applied whose reply was lost (a client with
// ContextTimeoutEnabled gives up at the deadline): the Guard reads the
// record back, finds its own outcome, and tells the caller it was recorded.
// (Before: ErrNotRecorded, while the record held the result.)
func TestCompletionReplyLostIsReadBack(t *testing.T) {
	proxy := newDropProxy(t, testenv.RedisAddr(t))
	c := redis.NewClient(&redis.Options{Addr: proxy.ln.Addr().String(), ContextTimeoutEnabled: true, PoolSize: 2})
	t.Cleanup(func() { _ = c.Close() })
	if err := c.Ping(context.Background()).Err(); err != nil {
		testenv.Missing(t, "redis ping: "+err.Error())
	}
	s := newStore(t, c)
	g, err := idem.New[int](s, idem.WithTakeoverAfter(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Do(context.Background(), "warm", func(ctx context.Context) (int, error) { return 0, nil }); err != nil {
		t.Fatal(err) // scripts loaded
	}
	var runs atomic.Int32
	v, err := g.Do(context.Background(), "lost", func(ctx context.Context) (int, error) {
		runs.Add(1)
		proxy.armed.Store(true) // the completion's reply is lost
		return 7, nil
	})
	if err != nil || v != 7 {
		t.Fatalf("Do: %d, %v; want 7 and no error (the record holds the outcome)", v, err)
	}
	v, err = g.Do(context.Background(), "lost", func(ctx context.Context) (int, error) { runs.Add(1); return 8, nil })
	if err != nil || v != 7 || runs.Load() != 1 {
		t.Fatalf("replay: %d, %v, %d runs; want 7 from one run", v, err, runs.Load())
	}
}
