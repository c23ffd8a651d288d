// Package idemmcp makes Model Context Protocol tool calls idempotent, on
// the official Go SDK (github.com/modelcontextprotocol/go-sdk): a server
// middleware that runs a tool at most once per idempotency key, across
// sessions, reconnections and server processes that share an idem store,
// and a client side that gives each logical call one key and retries it.
//
//	// Server
//	m, err := idemmcp.New(store, idemmcp.WithTools("send_email"), idemmcp.WithScope(idemmcp.ByUser))
//	server.AddReceivingMiddleware(m.Receiving())
//
//	// Client: one key per logical call, the same key on every retry
//	caller := &idemmcp.Caller{Session: reconnect, AttemptTimeout: 30 * time.Second}
//	res, err := caller.CallTool(ctx, &mcp.CallToolParams{Name: "send_email", Arguments: args})
//
// # The key
//
// The key is the string in the request's _meta under MetaKey,
// "io.github.idem-go/idempotency-key" (named as MCP asks of _meta keys
// outside the protocol: a reverse-DNS prefix, a slash, a name), 1 to 255
// visible ASCII characters (CheckKey). WithKeyArgument also accepts it from a named
// member of the tool's arguments, for keys a model fills in. Tools named by
// WithTools (every tool by default) are guarded when their call carries a
// key; a call without one runs unguarded, or, with WithRequired, is
// refused.
//
// Keys are scoped by tool name and by the caller that WithScope names:
// ByUser (the authenticated user of the bearer token, which survives
// reconnections: use it for servers that authenticate), BySession (the
// MCP session: a client that reconnects gets a new session and runs the
// tool again), or a function of your own. Without WithScope every client
// shares one key space per tool.
//
// # What a call gets
//
// The first call with a key runs the tool once, and its CallToolResult is
// recorded. A later call with the same key, tool and arguments, from any
// session or process, gets the recorded result, identical but for
// MetaReplayed (true) in its _meta; the tool does not run. Arguments are
// compared in their RFC 8785 form, so spacing and member order do not
// matter.
//
// A call the middleware refuses gets a tool error (IsError, with the
// reason as text content, which the model reads) whose _meta names the
// reason under MetaRefused (Refusal reads it); the tool did not run:
//
//	in_progress        a call with the key is running: "in progress, retry"
//	                   (with WithGuard(idem.OnDuplicate(idem.Wait)) the call
//	                   waits for the first one's result instead, bounded by
//	                   its request's context)
//	payload_mismatch   the key was used with other arguments
//	key_required       no key, and WithRequired asks for one
//	invalid_key        the key is not a valid key, or two keys differ
//	invalid_arguments  the arguments have no canonical JSON form
//	unauthenticated    the WithScope function named no caller
//	duplicate          policy idem.Raise, or the first result was not kept
//	unavailable        the store failed: retry with the same key
//	internal           the record cannot be read
//
// These are tool errors, not JSON-RPC errors, on purpose: MCP asks for
// errors a model can act on to be tool results, and "retry later" or "use
// a new key" is such an error; a client program tells them apart by
// MetaRefused. Protocol errors are the tool's own, passed through.
//
// What is recorded: a result that is not a tool error (DefaultRecordResult;
// WithRecordResult to record tool errors too). A tool error, a protocol
// error from the handler, and an input-required result release the key, so
// the client's retry runs the tool again. Progress notifications and log
// messages the tool sent are not replayed. The tool's context carries the
// claim's fencing token (idem.FencingToken).
//
// # Client
//
// Caller.CallTool sends a call with one key on every attempt and retries
// when the answer did not arrive (connection dropped, session ended) or
// asks for it (in_progress, unavailable), calling its Session function to
// reconnect. Over streamable HTTP give it an AttemptTimeout: when a call's
// response stream drops, the SDK's client can wait for an answer that
// will not come. ClientMiddleware, a sending middleware for the client, gives
// every tools/call that has no key one (from WithKey's context, or a fresh
// one), for applications that retry by themselves.
//
// A first call costs two store round trips, a replay one.
package idemmcp
