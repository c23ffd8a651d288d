package idemmcp

import (
	"context"
	"errors"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

type ctxKey struct{}

// WithKey returns a copy of ctx that makes ClientMiddleware send key with
// every tool call made with it. Use it for an application's own retry
// loop: every attempt made with the returned context carries the same key.
func WithKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, ctxKey{}, key)
}

func keyFrom(ctx context.Context) (string, bool) {
	k, ok := ctx.Value(ctxKey{}).(string)
	return k, ok
}

// ClientMiddleware returns a sending middleware for
// (*mcp.Client).AddSendingMiddleware that gives every tools/call a key: the
// one already in its _meta, else the one WithKey put in the context, else a
// fresh one (NewKey). The key is set on a copy of the call's parameters;
// the caller's are left alone.
//
// A fresh key lives as long as one CallTool: it protects against the
// request being delivered twice, not against the application calling
// again. To retry a call, send it with the same key: with WithKey, with
// SetKey, or with Caller, which does both the key and the retrying.
func ClientMiddleware() mcp.Middleware {
	return func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			if method != methodCallTool {
				return next(ctx, method, req)
			}
			// The SDK sends a call as a ClientRequest[Params] holding
			// *CallToolParams; a ClientRequest[*CallToolParams] is taken too.
			switch r := req.(type) {
			case *mcp.ClientRequest[mcp.Params]:
				if p, ok := r.Params.(*mcp.CallToolParams); ok {
					r.Params = stamp(ctx, p)
				}
			case *mcp.ClientRequest[*mcp.CallToolParams]:
				r.Params = stamp(ctx, r.Params)
			}
			return next(ctx, method, req)
		}
	}
}

// stamp returns p with a key: p itself when it has one, else a copy with
// the context's key or a fresh one.
func stamp(ctx context.Context, p *mcp.CallToolParams) *mcp.CallToolParams {
	if _, has := KeyOf(p); has {
		return p
	}
	key, ok := keyFrom(ctx)
	if !ok {
		key = NewKey()
	}
	return SetKey(p, key)
}

// Caller calls tools with one key per logical call and retries a call that
// may not have reached the tool, or whose first attempt is still running,
// with the same key. The server's Middleware runs the tool once and answers
// the retries with its result.
//
// A call is retried when CallTool fails without an answer from the server
// (the connection dropped, the session ended, a transport error) and when
// the answer is a refusal that asks for it (RefusedInProgress,
// RefusedUnavailable). Every other answer is returned: a tool result, a
// replay, another refusal, a protocol error from the server.
type Caller struct {
	// Session returns the session to call on. It is called before every
	// attempt; broken is the session of the previous attempt when that
	// attempt failed without an answer (nil on the first attempt, and
	// after an answer), so that Session can close it and connect again.
	Session func(ctx context.Context, broken *mcp.ClientSession) (*mcp.ClientSession, error)
	// Attempts is the most attempts of one call (default 5).
	Attempts int
	// Backoff is the wait before the second attempt, doubled before each
	// later one up to 5 s (default 100 ms).
	Backoff time.Duration
	// AttemptTimeout, if positive, bounds each attempt: one with no answer
	// by then is abandoned, its session treated as broken, and the call
	// retried (a tool still running then answers the retry with
	// RefusedInProgress, and a later one with its result). Set it for
	// streamable HTTP: when a call's response stream drops, the SDK's client may wait for
	// the answer for as long as the call's context allows (the server
	// keeps no events to resume the stream from) or while it closes the
	// broken session (up to 5 s).
	AttemptTimeout time.Duration
}

// CallTool calls the tool params names. The key is the one in params'
// _meta, else the one WithKey put in ctx, else a fresh one; every attempt
// sends it. ctx bounds the whole call, waits included. The error is the
// last attempt's.
func (c *Caller) CallTool(ctx context.Context, params *mcp.CallToolParams) (*mcp.CallToolResult, error) {
	if c == nil || c.Session == nil {
		return nil, errors.New("idemmcp: Caller has no Session function")
	}
	params = stamp(ctx, params)
	attempts, wait := c.Attempts, c.Backoff
	if attempts <= 0 {
		attempts = 5
	}
	if wait <= 0 {
		wait = 100 * time.Millisecond
	}
	var (
		broken *mcp.ClientSession
		res    *mcp.CallToolResult
		err    error
	)
	for i := range attempts {
		if i > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				if err == nil && res == nil {
					err = ctx.Err()
				}
				return res, err
			case <-t.C:
			}
			wait = min(2*wait, 5*time.Second)
		}
		var cs *mcp.ClientSession
		cs, err = c.Session(ctx, broken)
		if err != nil {
			res = nil
			if ctx.Err() != nil {
				return nil, err
			}
			continue
		}
		broken = nil
		res, err = c.attempt(ctx, cs, *params)
		switch {
		case err == nil:
			if r := Refusal(res); r != RefusedInProgress && r != RefusedUnavailable {
				return res, nil
			}
		case answered(err) || ctx.Err() != nil:
			return nil, err
		default:
			broken = cs
		}
	}
	return res, err
}

// attempt makes one attempt with a copy of the parameters (CallTool may
// fill in the arguments; the next attempt starts from the caller's). With
// an AttemptTimeout the attempt is abandoned when it is up, even if
// CallTool has not returned: after a dropped stream the SDK's client may
// hold a call while it tears the session down.
func (c *Caller) attempt(ctx context.Context, cs *mcp.ClientSession, p mcp.CallToolParams) (*mcp.CallToolResult, error) {
	if c.AttemptTimeout <= 0 {
		return cs.CallTool(ctx, &p)
	}
	actx, cancel := context.WithTimeout(ctx, c.AttemptTimeout)
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	ch := make(chan answer, 1)
	go func() {
		defer cancel()
		res, err := cs.CallTool(actx, &p)
		ch <- answer{res, err}
	}()
	select {
	case a := <-ch:
		return a.res, a.err
	case <-actx.Done():
		select {
		case a := <-ch:
			return a.res, a.err
		default:
			return nil, actx.Err()
		}
	}
}

// answered reports whether err is the server's answer to the call (a
// JSON-RPC error response), not a failure to get one. The SDK reports some
// failures as JSON-RPC errors too: a request its transport could not send
// (-32005), a client or server closing its end (-32003, -32004); those are
// retried.
func answered(err error) bool {
	var we *jsonrpc.Error
	if !errors.As(err, &we) {
		return false
	}
	switch we.Code {
	case codeClientClosing, codeServerClosing, codeRejected:
		return false
	}
	return true
}

// JSON-RPC error codes of the SDK's that say the call did not get an
// answer.
const (
	codeClientClosing = -32003
	codeServerClosing = -32004
	codeRejected      = -32005
)
