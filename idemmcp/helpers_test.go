package idemmcp_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/idemmcp"
	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/memstore"
)

func newStore(t testing.TB) storekit.Store {
	s, err := memstore.New()
	require.NoError(t, err)
	return s
}

func newMiddleware(t testing.TB, store storekit.Store, opts ...idemmcp.Option) *idemmcp.Middleware {
	t.Helper()
	m, err := idemmcp.New(store, opts...)
	require.NoError(t, err)
	return m
}

type emailIn struct {
	To   string `json:"to"`
	Body string `json:"body"`
	Key  string `json:"key,omitempty"`
}

type emailOut struct {
	ID   string `json:"id"`
	Sent int64  `json:"sent"`
}

// tools is what a test server's tools do: send_email counts its runs and
// answers with the count (so a second run shows), and waits for gate when
// one is set; flaky fails while fail is set.
type tools struct {
	runs    atomic.Int64
	started chan struct{} // receives once per run of send_email, if not nil
	gate    chan struct{} // send_email waits for it to close, if not nil
	fail    atomic.Bool
}

func (tl *tools) server(m *idemmcp.Middleware) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "mail", Version: "v1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "send_email", Description: "sends an e-mail"},
		func(ctx context.Context, req *mcp.CallToolRequest, in emailIn) (*mcp.CallToolResult, emailOut, error) {
			n := tl.runs.Add(1)
			if tl.started != nil {
				tl.started <- struct{}{}
			}
			if tl.gate != nil {
				<-tl.gate
			}
			out := emailOut{ID: fmt.Sprintf("msg_%d", n), Sent: n}
			return &mcp.CallToolResult{
				Meta:    mcp.Meta{"example.com/queue": "outbox"},
				Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("sent %s to %s", out.ID, in.To)}},
			}, out, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "flaky"},
		func(ctx context.Context, req *mcp.CallToolRequest, in emailIn) (*mcp.CallToolResult, any, error) {
			n := tl.runs.Add(1)
			if tl.fail.Load() {
				return nil, nil, fmt.Errorf("mail server down (run %d)", n)
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("ok run %d", n)}}}, nil, nil
		})
	mcp.AddTool(s, &mcp.Tool{Name: "lookup"},
		func(ctx context.Context, req *mcp.CallToolRequest, in emailIn) (*mcp.CallToolResult, any, error) {
			n := tl.runs.Add(1)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("lookup %d", n)}}}, nil, nil
		})
	if m != nil {
		s.AddReceivingMiddleware(m.Receiving())
	}
	return s
}

func newClient() *mcp.Client {
	return mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil)
}

// connectMemory connects a new client session to s over the SDK's
// in-memory transport.
func connectMemory(t testing.TB, s *mcp.Server) *mcp.ClientSession {
	t.Helper()
	ctx := context.Background()
	st, ct := mcp.NewInMemoryTransports()
	ss, err := s.Connect(ctx, st, nil)
	require.NoError(t, err)
	t.Cleanup(func() { ss.Close() })
	cs, err := newClient().Connect(ctx, ct, nil)
	require.NoError(t, err)
	t.Cleanup(func() { cs.Close() })
	return cs
}

// serveHTTP serves s over streamable HTTP on a loopback port.
func serveHTTP(t testing.TB, s *mcp.Server, wrap func(http.Handler) http.Handler) *httptest.Server {
	t.Helper()
	var h http.Handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	if wrap != nil {
		h = wrap(h)
	}
	ts := httptest.NewServer(h)
	t.Cleanup(ts.Close)
	return ts
}

// connectHTTP connects a new client session to the server at url.
func connectHTTP(t testing.TB, url string, hc *http.Client) *mcp.ClientSession {
	t.Helper()
	cs, err := newClient().Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { cs.Close() })
	return cs
}

func call(ctx context.Context, cs *mcp.ClientSession, tool, key string, args any) (*mcp.CallToolResult, error) {
	p := &mcp.CallToolParams{Name: tool, Arguments: args}
	if key != "" {
		p = idemmcp.SetKey(p, key)
	}
	return cs.CallTool(ctx, p)
}

func mail(to string) map[string]any { return map[string]any{"to": to, "body": "hello"} }

// text is the first text content of res.
func text(res *mcp.CallToolResult) string {
	if res == nil || len(res.Content) == 0 {
		return ""
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); ok {
		return tc.Text
	}
	return ""
}

// withoutReplayMark is res as JSON, its replay mark removed.
func withoutReplayMark(t testing.TB, res *mcp.CallToolResult) string {
	t.Helper()
	c := *res
	c.Meta = make(mcp.Meta)
	for k, v := range res.Meta {
		if k != idemmcp.MetaReplayed {
			c.Meta[k] = v
		}
	}
	b, err := json.Marshal(&c)
	require.NoError(t, err)
	return string(b)
}

func ctxTimeout(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
