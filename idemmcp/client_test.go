package idemmcp_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/idemmcp"
)

// keysSeen records the key of every tools/call a server receives.
type keysSeen struct {
	mu   sync.Mutex
	keys []any
}

func (k *keysSeen) middleware(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		if r, ok := req.(*mcp.CallToolRequest); ok {
			k.mu.Lock()
			k.keys = append(k.keys, r.Params.Meta[idemmcp.MetaKey])
			k.mu.Unlock()
		}
		return next(ctx, method, req)
	}
}

// ClientMiddleware gives every call a key: a fresh one per CallTool, the
// one WithKey names, or the one already in _meta; the caller's parameters
// are not changed.
func TestClientMiddleware(t *testing.T) {
	var tl tools
	s := tl.server(newMiddleware(t, newStore(t)))
	var seen keysSeen
	s.AddReceivingMiddleware(seen.middleware) // outermost: sees what the client sent
	st, ct := mcp.NewInMemoryTransports()
	_, err := s.Connect(context.Background(), st, nil)
	require.NoError(t, err)
	c := newClient()
	c.AddSendingMiddleware(idemmcp.ClientMiddleware())
	cs, err := c.Connect(context.Background(), ct, nil)
	require.NoError(t, err)
	defer cs.Close()
	ctx := ctxTimeout(t, 10*time.Second)

	p := &mcp.CallToolParams{Name: "send_email", Arguments: mail("jo@example.com")}
	for range 2 {
		res, err := cs.CallTool(ctx, p)
		require.NoError(t, err)
		assert.False(t, idemmcp.Replayed(res), "a new CallTool is a new logical call")
	}
	_, has := idemmcp.KeyOf(p)
	assert.False(t, has, "the key is set on a copy of the caller's parameters")

	kctx := idemmcp.WithKey(ctx, "op-1")
	for range 2 {
		_, err := cs.CallTool(kctx, &mcp.CallToolParams{Name: "send_email", Arguments: mail("jo@example.com")})
		require.NoError(t, err)
	}
	res, err := cs.CallTool(kctx, idemmcp.SetKey(&mcp.CallToolParams{Name: "send_email", Arguments: mail("jo@example.com")}, "op-2"))
	require.NoError(t, err)
	assert.False(t, idemmcp.Replayed(res))

	require.Len(t, seen.keys, 5, "%v", seen.keys)
	k0, ok0 := seen.keys[0].(string)
	k1, ok1 := seen.keys[1].(string)
	require.True(t, ok0 && ok1)
	assert.Len(t, k0, 26)
	assert.NotEqual(t, k0, k1)
	assert.Equal(t, []any{"op-1", "op-1", "op-2"}, seen.keys[2:])
	assert.EqualValues(t, 4, tl.runs.Load())
}

// Caller returns the server's answers as they are: a protocol error at
// once, a refusal that asks for a retry after its last attempt.
func TestCallerAnswers(t *testing.T) {
	tl := tools{started: make(chan struct{}, 1), gate: make(chan struct{})}
	defer close(tl.gate)
	s := tl.server(newMiddleware(t, newStore(t)))
	cs := connectMemory(t, s)
	var sessions atomic.Int64
	caller := &idemmcp.Caller{
		Session: func(context.Context, *mcp.ClientSession) (*mcp.ClientSession, error) {
			sessions.Add(1)
			return cs, nil
		},
		Attempts: 3, Backoff: time.Millisecond,
	}
	ctx := ctxTimeout(t, 10*time.Second)

	_, err := caller.CallTool(ctx, &mcp.CallToolParams{Name: "no_such_tool"})
	require.Error(t, err)
	assert.EqualValues(t, 1, sessions.Load(), "a protocol error is the server's answer: not retried")

	go call(ctx, connectMemory(t, s), "send_email", "k-busy", mail("x"))
	<-tl.started
	sessions.Store(0)
	res, err := caller.CallTool(ctx, idemmcp.SetKey(&mcp.CallToolParams{Name: "send_email", Arguments: mail("x")}, "k-busy"))
	require.NoError(t, err)
	assert.Equal(t, idemmcp.RefusedInProgress, idemmcp.Refusal(res))
	assert.EqualValues(t, 3, sessions.Load(), "retried until its attempts ran out")

	_, err = (&idemmcp.Caller{}).CallTool(ctx, &mcp.CallToolParams{Name: "send_email"})
	assert.Error(t, err)

	down := errors.New("no route to host")
	sessions.Store(0)
	_, err = (&idemmcp.Caller{Attempts: 2, Backoff: time.Millisecond, Session: func(context.Context, *mcp.ClientSession) (*mcp.ClientSession, error) {
		sessions.Add(1)
		return nil, down
	}}).CallTool(ctx, &mcp.CallToolParams{Name: "send_email"})
	assert.ErrorIs(t, err, down)
	assert.EqualValues(t, 2, sessions.Load())
}
