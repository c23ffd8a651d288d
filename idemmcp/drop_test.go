package idemmcp_test

import (
	"context"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/idemmcp"
)

// droppable is a client transport whose connection can be cut, as a
// network failure cuts it: both ends see their reads and writes fail.
type droppable struct {
	mcp.Transport
	conn atomic.Pointer[mcp.Connection]
}

func (d *droppable) Connect(ctx context.Context) (mcp.Connection, error) {
	c, err := d.Transport.Connect(ctx)
	if err == nil {
		d.conn.Store(&c)
	}
	return c, err
}

func (d *droppable) drop() { (*d.conn.Load()).Close() }

// A client's connection drops while the tool runs. Caller reconnects (a
// new session), retries with the same key, is told the call is in
// progress, retries again once the tool has finished, and gets the first
// run's result. The tool ran once.
func TestDroppedConnection(t *testing.T) {
	run := func(t *testing.T, tl *tools, connect func() (*mcp.ClientSession, error), drop func()) {
		ctx := ctxTimeout(t, 30*time.Second)
		var sessions atomic.Int64
		reconnected := make(chan struct{})
		caller := &idemmcp.Caller{
			Session: func(ctx context.Context, broken *mcp.ClientSession) (*mcp.ClientSession, error) {
				if broken != nil {
					go broken.Close() // it may wait for its calls to give up
				}
				cs, err := connect()
				if err != nil {
					t.Logf("connect: %v", err)
					return nil, err
				}
				t.Cleanup(func() { cs.Close() })
				if sessions.Add(1) == 2 {
					close(reconnected)
				}
				return cs, nil
			},
			Attempts:       50,
			Backoff:        20 * time.Millisecond,
			AttemptTimeout: time.Second,
		}
		type answer struct {
			res *mcp.CallToolResult
			err error
		}
		done := make(chan answer, 1)
		go func() {
			res, err := caller.CallTool(ctx, &mcp.CallToolParams{Name: "send_email", Arguments: mail("dee@example.com")})
			done <- answer{res, err}
		}()
		<-tl.started
		drop()
		select {
		case <-reconnected:
		case a := <-done:
			t.Fatalf("the call ended before a retry: %v, %v", a.err, text(a.res))
		}
		time.Sleep(150 * time.Millisecond) // the retries are told "in progress"
		close(tl.gate)
		a := <-done
		require.NoError(t, a.err)
		assert.Equal(t, "sent msg_1 to dee@example.com", text(a.res))
		assert.True(t, idemmcp.Replayed(a.res), "the retry got the first run's result")
		assert.GreaterOrEqual(t, sessions.Load(), int64(2))
		assert.EqualValues(t, 1, tl.runs.Load(), "the tool ran once")
	}

	t.Run("memory", func(t *testing.T) {
		tl := &tools{started: make(chan struct{}, 4), gate: make(chan struct{})}
		s := tl.server(newMiddleware(t, newStore(t)))
		var first atomic.Pointer[droppable]
		run(t, tl, func() (*mcp.ClientSession, error) {
			st, ct := mcp.NewInMemoryTransports()
			ss, err := s.Connect(context.Background(), st, nil)
			if err != nil {
				return nil, err
			}
			t.Cleanup(func() { ss.Close() })
			d := &droppable{Transport: ct}
			cs, err := newClient().Connect(context.Background(), d, nil)
			first.CompareAndSwap(nil, d)
			return cs, err
		}, func() { first.Load().drop() })
	})
	t.Run("http", func(t *testing.T) {
		tl := &tools{started: make(chan struct{}, 4), gate: make(chan struct{})}
		s := tl.server(newMiddleware(t, newStore(t)))
		ts := serveHTTP(t, s, nil)
		var conns cutter
		hc := &http.Client{Transport: &http.Transport{DialContext: conns.dial}}
		run(t, tl, func() (*mcp.ClientSession, error) {
			return newClient().Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: ts.URL, HTTPClient: hc, MaxRetries: -1}, nil)
		}, conns.cut)
	})
}

// cutter dials TCP connections and cuts them all at once, as a network
// failure does.
type cutter struct {
	mu    sync.Mutex
	conns []net.Conn
}

func (c *cutter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
	if err == nil {
		c.mu.Lock()
		c.conns = append(c.conns, conn)
		c.mu.Unlock()
	}
	return conn, err
}

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, conn := range c.conns {
		conn.Close()
	}
	c.conns = nil
}
