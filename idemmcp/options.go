package idemmcp

import (
	"context"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/storekit"
)

// Option configures a Middleware. Options are checked by New, which
// returns every invalid one as an *storekit.OptionError (matching
// idem.ErrInvalidOption), joined.
type Option func(*config)

type config struct {
	tools     map[string]bool // nil: every tool
	required  bool
	keyArg    string
	scope     ScopeFunc
	record    func(*mcp.CallToolResult) bool
	guardOpts []idem.Option
	errs      []error
}

func (c *config) invalid(option, reason string) {
	c.errs = append(c.errs, &storekit.OptionError{Option: "idemmcp." + option, Reason: reason})
}

// A ScopeFunc names who is calling a tool. Keys are scoped by the name it
// returns: the same key from two callers names two independent calls. An
// error, or an empty name, refuses the call (RefusedUnauthenticated).
type ScopeFunc func(ctx context.Context, req *mcp.CallToolRequest) (string, error)

var (
	errNoUser    = errors.New("idemmcp: the request carries no authenticated user (auth.TokenInfo.UserID)")
	errNoSession = errors.New("idemmcp: the request's session has no ID")
)

// ByUser scopes keys by the authenticated user: the UserID of the bearer
// token the transport verified (auth.RequireBearerToken in front of the
// streamable HTTP handler puts it in req.Extra.TokenInfo). A user's retry
// from a new connection or a new session finds its first call's result; no
// other user can. A request without a TokenInfo or with an empty UserID is
// refused. This is the scope for a server that authenticates its clients.
func ByUser(_ context.Context, req *mcp.CallToolRequest) (string, error) {
	if req == nil || req.Extra == nil || req.Extra.TokenInfo == nil || req.Extra.TokenInfo.UserID == "" {
		return "", errNoUser
	}
	return req.Extra.TokenInfo.UserID, nil
}

// BySession scopes keys by the MCP session (the Mcp-Session-Id of the
// streamable HTTP transport). A retry is answered only within the session
// of the first call: a client that reconnects and gets a new session runs
// the tool again, so this scope does not cover a dropped connection. Use it
// for servers without authentication whose clients must never see each
// other's results, and whose sessions outlive a connection (streamable
// HTTP with resumption). Transports without session IDs (stdio, in-memory,
// stateless HTTP) have every call refused.
func BySession(_ context.Context, req *mcp.CallToolRequest) (string, error) {
	if req == nil || req.Session == nil || req.Session.ID() == "" {
		return "", errNoSession
	}
	return req.Session.ID(), nil
}

// WithScope sets who a key belongs to: ByUser, BySession, or a function of
// the application's (an API key from req.Extra.Header, a tenant). Without
// it every client of the server shares one key space per tool, which suits
// a server with one client (stdio) or clients that trust each other, keys
// being random (NewKey: 128 bits) and so not guessed.
func WithScope(scope ScopeFunc) Option {
	return func(c *config) {
		if scope == nil {
			c.invalid("WithScope", "function is nil")
		}
		c.scope = scope
	}
}

// WithTools restricts the guarded tools to those named. Calls of other
// tools pass through untouched, key or not. By default every tool call
// that carries a key is guarded.
func WithTools(names ...string) Option {
	return func(c *config) {
		if len(names) == 0 {
			c.invalid("WithTools", "no tools")
			return
		}
		c.tools = make(map[string]bool, len(names))
		for _, n := range names {
			if n == "" {
				c.invalid("WithTools", "empty tool name")
				continue
			}
			c.tools[n] = true
		}
	}
}

// WithRequired makes the key mandatory: a call of a guarded tool without
// one is refused (RefusedKeyRequired), the tool not run. Without WithTools
// every tool is guarded, so every tool call then needs a key: name the
// tools to guard.
func WithRequired() Option {
	return func(c *config) { c.required = true }
}

// WithKeyArgument also takes the key from the tool's arguments: the
// top-level member name of the arguments object, a string. It is for
// clients that cannot set _meta (a model fills in the arguments; give the
// tool's input schema a property of that name, so that the model sends one
// key per operation and the same key when it repeats itself). A call with
// keys in both places that differ is refused (RefusedInvalidKey). The
// argument stays in the arguments the tool sees, and in the fingerprint.
func WithKeyArgument(name string) Option {
	return func(c *config) {
		if name == "" {
			c.invalid("WithKeyArgument", "empty argument name")
		}
		c.keyArg = name
	}
}

// DefaultRecordResult is the default of WithRecordResult: a result is
// recorded unless it is a tool error (IsError). A tool error releases the
// key, and the client's retry with it runs the tool again: an error is
// what a client retries, and a tool that reports one has, by MCP's
// convention, not done its work. A tool that fails after a side effect
// should report success with what happened, or have its errors recorded
// (WithRecordResult).
func DefaultRecordResult(res *mcp.CallToolResult) bool { return !res.IsError }

// WithRecordResult sets which results are recorded and replayed. A result
// not recorded releases the key: the next call with it runs the tool
// again. Protocol errors (the handler returned an error, the tool is
// unknown) and input-required results are never recorded.
func WithRecordResult(record func(res *mcp.CallToolResult) bool) Option {
	return func(c *config) {
		if record == nil {
			c.invalid("WithRecordResult", "function is nil")
		}
		c.record = record
	}
}

// WithGuard passes options to the idem Guard underneath: TTL, takeover
// threshold, heartbeat, secret, namespace, observer, local cache, and the
// duplicate policy: idem.OnDuplicate(idem.Wait) makes a call that finds
// its key in progress wait for the first call's result (bounded by its own
// context) instead of being refused with RefusedInProgress. The failure
// policy must stay at its default, idem.Unlock (New refuses idem.Lock: a
// result not recorded must release its key). The middleware encodes its
// records itself: an idem.WithCodec given here is overridden.
func WithGuard(opts ...idem.Option) Option {
	return func(c *config) { c.guardOpts = append(c.guardOpts, opts...) }
}
