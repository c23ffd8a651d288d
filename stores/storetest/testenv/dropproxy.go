package testenv

import (
	"context"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem"
)

// DropProxy forwards TCP between clients and a server. While Armed, the
// next reply from the server is swallowed and that connection goes silent,
// as if the reply were lost on the way back: the server applied the
// request, the client never hears so.
type DropProxy struct {
	// Armed loses the next reply (on whichever connection carries it).
	Armed atomic.Bool

	ln     net.Listener
	target string
	wg     sync.WaitGroup
}

// NewDropProxy starts a DropProxy to target on a free loopback port; it
// stops when the test ends.
func NewDropProxy(t testing.TB, target string) *DropProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &DropProxy{ln: ln, target: target}
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
func (p *DropProxy) Addr() string { return p.ln.Addr().String() }

func (p *DropProxy) serve(c net.Conn) {
	defer c.Close()
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		return
	}
	defer s.Close()
	go func() { _, _ = io.Copy(s, c); _ = s.Close() }()
	buf := make([]byte, 64<<10)
	silent := false
	for {
		n, err := s.Read(buf)
		if n > 0 && !silent && p.Armed.CompareAndSwap(true, false) {
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

// CheckCompletionReadBack runs a Guard on s, whose client reaches its
// server through p, and loses the reply of one completion the server
// applied: the Guard must read the record back and tell the caller the
// outcome was recorded (7, no error), and a replay must return 7 without
// running fn again.
func CheckCompletionReadBack(t testing.TB, s idem.Store, p *DropProxy) {
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
		p.Armed.Store(true) // the completion's reply is lost
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
