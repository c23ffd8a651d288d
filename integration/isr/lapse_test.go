package isr_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/isrtest"
	"github.com/idem-go/idem/isr/redisisr"
)

// cutProxy forwards TCP connections to a server until Cut, after which it
// becomes a black hole: connections stay open (new ones are accepted) but
// nothing reaches the server and nothing comes back, as when a network
// path to the table is cut without an answer.
type cutProxy struct {
	ln     net.Listener
	target string
	cut    atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &cutProxy{ln: ln, target: target}
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

func (p *cutProxy) Addr() string { return p.ln.Addr().String() }

// Cut stops all traffic, in both directions, for good.
func (p *cutProxy) Cut() { p.cut.Store(true) }

func (p *cutProxy) track(c net.Conn) {
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
}

func (p *cutProxy) serve() {
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
func (p *cutProxy) pipe(dst, src net.Conn) {
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

// lapseCase is one table seen two ways: through a connection that can be
// cut (the lease holder's) and directly (the other worker's).
type lapseCase struct {
	holder, other isr.Table
	cut           func()
}

// A lease holder whose refreshes fail stops rendering before another worker
// could acquire the lease, and does not publish: on Redis and DynamoDB the
// holder's connection to the table is cut (a black hole, so its refreshes
// hang), on files its refreshes fail.
func TestLeaseLapseStopsRender(t *testing.T) {
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		direct := redisClient(t)
		prefix := redisPrefix(t, direct)
		proxy := newCutProxy(t, testenv.RedisAddr(t))
		viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
		t.Cleanup(func() { _ = viaProxy.Close() })
		holder, err := redisisr.NewTable(viaProxy, redisisr.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		other, err := redisisr.NewTable(direct, redisisr.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		testLeaseLapse(t, lapseCase{holder: holder, other: other, cut: proxy.Cut})
	})
	t.Run("dynamo", func(t *testing.T) {
		t.Parallel()
		direct, _ := dynamoClient(t)
		table := freshTable(t, direct)
		endpoint := testenv.DynamoDBEndpoint(t)
		proxy := newCutProxy(t, endpoint[len("http://"):])
		viaProxy := dynamodb.New(dynamodb.Options{
			Region:           "us-east-1",
			BaseEndpoint:     aws.String("http://" + proxy.Addr()),
			Credentials:      credentials.NewStaticCredentialsProvider("local", "local", ""),
			RetryMaxAttempts: 1,
		})
		testLeaseLapse(t, lapseCase{holder: mustDynamoTable(t, viaProxy, table), other: mustDynamoTable(t, direct, table), cut: proxy.Cut})
	})
	t.Run("file", func(t *testing.T) {
		t.Parallel()
		dir := t.TempDir()
		other := newFileTable(t, dir)
		holder := &failingRefresh{Table: newFileTable(t, dir)}
		testLeaseLapse(t, lapseCase{holder: holder, other: other, cut: func() { holder.failing.Store(true) }})
	})
}

// failingRefresh is a Table whose refreshes fail once failing is set, as
// if the table could not be reached.
type failingRefresh struct {
	isr.Table
	failing atomic.Bool
}

func (f *failingRefresh) RefreshLease(ctx context.Context, in isr.RefreshInput) (isr.Lease, error) {
	if f.failing.Load() {
		return isr.Lease{}, errors.New("table unreachable")
	}
	return f.Table.RefreshLease(ctx, in)
}

func testLeaseLapse(t *testing.T, lc lapseCase) {
	ctx := context.Background()
	pk := isrtest.NewPK(t)
	seed := seedStale(t, lc.other, pk)
	const lease = 4 * time.Second
	holder := mustCoordinator(t, lc.holder, isr.WithLeaseDuration(lease))
	other := mustCoordinator(t, lc.other, isr.WithLeaseDuration(lease))

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
		lc.cut()
		seen.leaseExpiry = l.ExpiresAt
		select {
		case <-rctx.Done():
			seen.stopped = true
		case <-time.After(lease + 3*time.Second): // only a broken cut-off gets here
		}
		seen.cause = context.Cause(rctx)
		// At the moment the render is told to stop, the lease is still
		// held: no other worker could have acquired it yet.
		cur, err := lc.other.GetLease(ctx, pk)
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
	if m, err := lc.other.GetMeta(ctx, pk); err != nil || m != seed {
		t.Fatalf("META = %+v, %v; want the seeded %+v (nothing published)", m, err, seed)
	}
}
