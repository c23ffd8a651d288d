package isrtesting

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/isrtest"
)

// CutProxy forwards TCP connections to a server until Cut, after which it
// becomes a black hole: connections stay open (new ones are accepted) but
// nothing reaches the server and nothing comes back, as when a network
// path to the table is cut without an answer.
type CutProxy struct {
	ln     net.Listener
	target string
	cut    atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

// NewCutProxy starts a CutProxy to target (host:port), closed when the
// test ends.
func NewCutProxy(t *testing.T, target string) *CutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &CutProxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(func() {
		_ = ln.Close()
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			_ = c.Close()
		}
	})
	return p
}

func (p *CutProxy) Addr() string { return p.ln.Addr().String() }

// Cut stops all traffic, in both directions, for good.
func (p *CutProxy) Cut() { p.cut.Store(true) }

func (p *CutProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

func (p *CutProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.track(c)
		go func() {
			if p.cut.Load() {
				_, _ = io.Copy(io.Discard, c)
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = c.Close()
				return
			}
			p.track(up)
			go p.pipe(up, c)
			p.pipe(c, up)
		}()
	}
}

// pipe copies src to dst until Cut, then swallows what src sends.
func (p *CutProxy) pipe(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !p.cut.Load() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// LapseCase is one table seen two ways: through a connection that can be
// cut (the lease holder's) and directly (the other worker's).
type LapseCase struct {
	Holder, Other isr.Table
	Cut           func()
}

// RunLeaseLapse: a lease holder whose refreshes fail (lc.Cut makes them
// fail) stops rendering before another worker could acquire the lease,
// and does not publish.
func RunLeaseLapse(t *testing.T, lc LapseCase) {
	ctx := context.Background()
	pk := isrtest.NewPK(t)
	seed := SeedStale(t, lc.Other, pk)
	const lease = 4 * time.Second
	holder := MustCoordinator(t, lc.Holder, isr.WithLeaseDuration(lease))
	other := MustCoordinator(t, lc.Other, isr.WithLeaseDuration(lease))

	type check struct {
		stopped     bool
		held        bool
		otherErr    error
		cause       error
		leaseExpiry int64
	}
	var seen check
	// The deadline only keeps a broken variant (whose publish would go to
	// the cut table) from hanging the test.
	hctx, cancel := context.WithTimeout(ctx, lease+8*time.Second)
	defer cancel()
	res, err := holder.Regenerate(hctx, pk, nil, func(rctx context.Context, l isr.Lease) (isr.Page, error) {
		lc.Cut()
		seen.leaseExpiry = l.ExpiresAt
		select {
		case <-rctx.Done():
			seen.stopped = true
		case <-time.After(lease + 3*time.Second): // only a broken cut-off gets here
		}
		seen.cause = context.Cause(rctx)
		// At the moment the render is told to stop, the lease is still
		// held: no other worker could have acquired it yet.
		cur, err := lc.Other.GetLease(ctx, pk)
		seen.held = err == nil && cur.Token == l.Token && cur.Held(time.Now())
		_, seen.otherErr = other.TryAcquire(ctx, pk, &seed)
		// A render that ignores its context and returns a page anyway
		// must not get it published.
		return isr.Page{S3Key: "lapsed-render", RevalidateSeconds: 60}, nil
	})
	if !seen.stopped {
		t.Fatalf("the render was not stopped although its lease could not be refreshed (lease expired at %d)", seen.leaseExpiry)
	}
	var lapse *isr.LapseError
	if !errors.As(seen.cause, &lapse) || !errors.Is(seen.cause, isr.ErrLeaseLost) || lapse.PK != pk || lapse.ExpiresAt != seen.leaseExpiry {
		t.Fatalf("render context cause = %v, want a *LapseError for the lease", seen.cause)
	}
	if !seen.held || !errors.Is(seen.otherErr, isr.ErrLeaseHeld) {
		t.Fatalf("when the render was stopped: lease held %v, other worker's acquire %v; want held and ErrLeaseHeld", seen.held, seen.otherErr)
	}
	if !errors.As(err, &lapse) || res.Outcome == isr.OutcomeRegenerated {
		t.Fatalf("Regenerate = %+v, %v; want a *LapseError", res, err)
	}
	if m, err := lc.Other.GetMeta(ctx, pk); err != nil || m != seed {
		t.Fatalf("META = %+v, %v; want the seeded %+v (nothing published)", m, err, seed)
	}
}
