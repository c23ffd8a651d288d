package testenv

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

// Proxy forwards TCP between clients and a server, and loses or delays
// what crosses it on demand, as a network would:
//
//   - DropNextReply loses the next reply from the server and silences the
//     connection that carried it: the server applied the request, the
//     client never hears so.
//   - HoldNext and HoldMatching hold requests for a while and then deliver
//     them to the server, even when the client has given up and closed the
//     connection meanwhile: requests delayed by the network, not lost.
//
// A held request holds everything after it on its connection; the other
// connections flow.
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	dropNext atomic.Bool
	dropped  atomic.Int64

	mu        sync.Mutex
	hold      holdMode
	holdFor   time.Duration
	match     []byte
	until     time.Time     // end of the HoldMatching window, set by its first match
	delivered chan struct{} // closed once a request held since the last Hold call reached the server
	closed    bool          // delivered is closed
}

type holdMode int

const (
	holdNone     holdMode = iota
	holdNext              // the next request
	holdMatching          // the requests containing match, within holdFor of the first
)

// NewProxy starts a Proxy to target on a free loopback port; it stops when
// the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, delivered: make(chan struct{})}
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

// Addr is the address clients dial instead of the server's.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Dial connects to the proxy, whatever network and address it is given: a
// dial function for drivers that take one (pgx's DialFunc, the MySQL
// driver's Config.DialFunc).
func (p *Proxy) Dial(ctx context.Context, _, _ string) (net.Conn, error) {
	var d net.Dialer
	return d.DialContext(ctx, "tcp", p.Addr())
}

// DropNextReply loses the next reply from the server, on whichever
// connection carries it; that connection stays open and silent.
func (p *Proxy) DropNextReply() { p.dropNext.Store(true) }

// Dropped returns how many replies DropNextReply has lost so far.
func (p *Proxy) Dropped() int { return int(p.dropped.Load()) }

// HoldNext holds the next request a client sends, on whichever connection,
// for d, and then delivers it.
func (p *Proxy) HoldNext(d time.Duration) { p.arm(holdNext, d, nil) }

// HoldMatching holds the first request from now on that contains match,
// and every other request containing match that arrives within d of it,
// until d after the first one, and then delivers them. Later requests
// flow.
func (p *Proxy) HoldMatching(match []byte, d time.Duration) {
	p.arm(holdMatching, d, bytes.Clone(match))
}

// Delivered returns a channel closed once a request held since the last
// HoldNext or HoldMatching has been delivered to the server.
func (p *Proxy) Delivered() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.delivered
}

func (p *Proxy) arm(mode holdMode, d time.Duration, match []byte) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hold, p.holdFor, p.match, p.until = mode, d, match, time.Time{}
	if p.closed {
		p.delivered, p.closed = make(chan struct{}), false
	}
}

// holdUntil reports whether chunk, a read from a client, starts a held
// request, and until when it is held.
func (p *Proxy) holdUntil(chunk []byte) (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	switch p.hold {
	case holdNext:
		p.hold = holdNone
		return now.Add(p.holdFor), true
	case holdMatching:
		if !bytes.Contains(chunk, p.match) {
			return time.Time{}, false
		}
		if p.until.IsZero() {
			p.until = now.Add(p.holdFor)
		}
		if now.Before(p.until) {
			return p.until, true
		}
		p.hold = holdNone
	}
	return time.Time{}, false
}

func (p *Proxy) markDelivered() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		close(p.delivered)
		p.closed = true
	}
}

func (p *Proxy) serve(c net.Conn) {
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		_ = c.Close()
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		p.replies(c, s)
		_ = c.Close()
	}()
	p.requests(c, s)
	_ = s.Close()
}

// requests forwards what the client sends, holding what is to be held.
func (p *Proxy) requests(c, s net.Conn) {
	buf := make([]byte, 64<<10)
	var held []byte // non-nil while a request is held
	var until time.Time
	for {
		n, err := c.Read(buf)
		chunk := buf[:n]
		if held == nil && n > 0 {
			if u, ok := p.holdUntil(chunk); ok {
				held, until = []byte{}, u
			}
		}
		if held != nil {
			held = append(held, chunk...)
			if err == nil && time.Now().Before(until) {
				// Keep reading (the client may close), deliver later.
				_ = c.SetReadDeadline(until)
				continue
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				err = nil
			}
			time.Sleep(time.Until(until))
			_, werr := s.Write(held)
			held = nil
			_ = c.SetReadDeadline(time.Time{})
			p.markDelivered()
			if werr != nil {
				return
			}
		} else if n > 0 {
			if _, werr := s.Write(chunk); werr != nil {
				return
			}
		}
		if err != nil {
			// The client left: let the server read and answer what was
			// delivered before the close.
			time.Sleep(100 * time.Millisecond)
			return
		}
	}
}

// replies forwards what the server sends, losing what is to be lost.
func (p *Proxy) replies(c, s net.Conn) {
	buf := make([]byte, 64<<10)
	silent := false
	for {
		n, err := s.Read(buf)
		if n > 0 && !silent && p.dropNext.CompareAndSwap(true, false) {
			silent = true // this reply, and everything after it, is lost
			p.dropped.Add(1)
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

// CheckCompletionReadBack runs a Guard on s, whose client reaches its
// server through p, and loses the reply of one completion the server
// applied: the Guard must read the record back and tell the caller the
// outcome was recorded (7, no error), and a replay must return 7 without
// running fn again.
func CheckCompletionReadBack(t testing.TB, s storekit.Store, p *Proxy) {
	t.Helper()
	g, err := idem.New[int](s, idem.WithTakeoverAfter(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := g.Do(ctx, "warm", func(context.Context) (int, error) { return 0, nil }); err != nil {
		t.Fatal(err) // scripts loaded, statements prepared
	}
	var runs atomic.Int32
	v, err := g.Do(ctx, "lost", func(context.Context) (int, error) {
		runs.Add(1)
		p.DropNextReply() // the completion's reply is lost
		return 7, nil
	})
	if err != nil || v != 7 {
		t.Fatalf("Do: %d, %v; want 7 and no error (the record holds the outcome)", v, err)
	}
	v, err = g.Do(ctx, "lost", func(context.Context) (int, error) { runs.Add(1); return 8, nil })
	if err != nil || v != 7 || runs.Load() != 1 {
		t.Fatalf("replay: %d, %v, %d runs; want 7 from one run", v, err, runs.Load())
	}
}
