package idemmcp_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemmcp"
	"github.com/idem-go/idem/storekit"
)

// transports runs a test over the SDK's in-memory transport and over
// streamable HTTP on a loopback port; connect gives a new client session
// to the server each call.
func transports(t *testing.T, test func(t *testing.T, connect func(s *mcp.Server) func() *mcp.ClientSession)) {
	t.Run("memory", func(t *testing.T) {
		test(t, func(s *mcp.Server) func() *mcp.ClientSession {
			return func() *mcp.ClientSession { return connectMemory(t, s) }
		})
	})
	t.Run("http", func(t *testing.T) {
		test(t, func(s *mcp.Server) func() *mcp.ClientSession {
			ts := serveHTTP(t, s, nil)
			return func() *mcp.ClientSession { return connectHTTP(t, ts.URL, nil) }
		})
	})
}

func TestNewOptions(t *testing.T) {
	_, err := idemmcp.New(newStore(t),
		nil,
		idemmcp.WithScope(nil),
		idemmcp.WithTools(),
		idemmcp.WithTools("send_email", ""),
		idemmcp.WithKeyArgument(""),
		idemmcp.WithRecordResult(nil),
		idemmcp.WithGuard(idem.WithTTL(-time.Second)),
	)
	require.ErrorIs(t, err, idem.ErrInvalidOption)
	for _, want := range []string{"nil option", "WithScope", "no tools", "empty tool name", "WithKeyArgument", "WithRecordResult", "WithTTL"} {
		assert.Contains(t, err.Error(), want)
	}
	var n int
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var oe *storekit.OptionError
		if assert.ErrorAs(t, e, &oe, "%v", e) {
			n++
		}
	}
	assert.Equal(t, 7, n)

	_, err = idemmcp.New(nil)
	assert.ErrorIs(t, err, idem.ErrInvalidOption)

	_, err = idemmcp.New(newStore(t), idemmcp.WithGuard(idem.OnFailure(idem.Lock)))
	var oe *storekit.OptionError
	require.ErrorAs(t, err, &oe)
	assert.Contains(t, oe.Error(), "OnFailure(idem.Lock)")

	_, err = idemmcp.New(newStore(t), idemmcp.WithTools("send_email"), idemmcp.WithRequired(),
		idemmcp.WithScope(idemmcp.ByUser), idemmcp.WithKeyArgument("key"), idemmcp.WithGuard(idem.OnDuplicate(idem.Wait)))
	assert.NoError(t, err)
}

// A Middleware not made by New refuses tool calls with a protocol error
// and passes other methods through.
func TestZeroMiddleware(t *testing.T) {
	var tl tools
	cs := connectMemory(t, tl.server(&idemmcp.Middleware{}))
	_, err := call(context.Background(), cs, "send_email", "k1", mail("a@example.com"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not made by idemmcp.New")
	assert.Zero(t, tl.runs.Load())
	_, err = cs.ListTools(context.Background(), nil)
	assert.NoError(t, err)
}

func TestCheckKey(t *testing.T) {
	for _, k := range []string{"a", "8e03978e-40d5-43e8-bc93-6894a57f9324", strings.Repeat("k", idemmcp.MaxKeyLen), "order:42/charge", idemmcp.NewKey()} {
		assert.NoError(t, idemmcp.CheckKey(k), k)
	}
	for _, k := range []string{"", strings.Repeat("k", idemmcp.MaxKeyLen+1), "a b", "caf\u00e9", "\x00"} {
		assert.ErrorIs(t, idemmcp.CheckKey(k), idem.ErrInvalidKey, "%q", k)
	}
	assert.NotEqual(t, idemmcp.NewKey(), idemmcp.NewKey())
}

// The first call runs the tool; a repeat from another session gets the
// identical CallToolResult (content, structured content, _meta), marked as
// a replay, and the tool does not run again.
func TestReplayIdentical(t *testing.T) {
	transports(t, func(t *testing.T, connect func(*mcp.Server) func() *mcp.ClientSession) {
		var tl tools
		conn := connect(tl.server(newMiddleware(t, newStore(t))))
		ctx := ctxTimeout(t, 10*time.Second)

		first, err := call(ctx, conn(), "send_email", "order-1042", mail("ann@example.com"))
		require.NoError(t, err)
		assert.False(t, idemmcp.Replayed(first))
		assert.Equal(t, "sent msg_1 to ann@example.com", text(first))
		assert.Equal(t, "outbox", first.Meta["example.com/queue"])

		for _, cs := range []*mcp.ClientSession{conn(), conn()} {
			again, err := call(ctx, cs, "send_email", "order-1042", mail("ann@example.com"))
			require.NoError(t, err)
			assert.True(t, idemmcp.Replayed(again))
			assert.Empty(t, idemmcp.Refusal(again))
			assert.Equal(t, withoutReplayMark(t, first), withoutReplayMark(t, again))
		}
		assert.EqualValues(t, 1, tl.runs.Load())

		// Another key is another call.
		other, err := call(ctx, conn(), "send_email", "order-1043", mail("ann@example.com"))
		require.NoError(t, err)
		assert.Equal(t, "sent msg_2 to ann@example.com", text(other))
		// The same key for another tool is another call too.
		_, err = call(ctx, conn(), "lookup", "order-1042", mail("ann@example.com"))
		require.NoError(t, err)
		assert.EqualValues(t, 3, tl.runs.Load())
	})
}

// 16 clients, each on its own session, call one tool with one key at
// once: the tool runs once and every caller gets its result, under the
// default policy (Caller retries the in-progress refusals) and under
// idem.Wait (the duplicates wait).
func TestConcurrentOneKey(t *testing.T) {
	for _, policy := range []idem.DuplicatePolicy{idem.Return, idem.Wait} {
		t.Run(string(policy), func(t *testing.T) {
			transports(t, func(t *testing.T, connect func(*mcp.Server) func() *mcp.ClientSession) {
				tl := tools{started: make(chan struct{}, 16), gate: make(chan struct{})}
				conn := connect(tl.server(newMiddleware(t, newStore(t), idemmcp.WithGuard(idem.OnDuplicate(policy)))))
				ctx := ctxTimeout(t, 20*time.Second)
				sessions := make([]*mcp.ClientSession, 16)
				for i := range sessions {
					sessions[i] = conn()
				}
				results := make([]*mcp.CallToolResult, 16)
				errs := make([]error, 16)
				var wg sync.WaitGroup
				for i, cs := range sessions {
					wg.Go(func() {
						c := &idemmcp.Caller{
							Session:  func(context.Context, *mcp.ClientSession) (*mcp.ClientSession, error) { return cs, nil },
							Attempts: 100, Backoff: 10 * time.Millisecond,
						}
						results[i], errs[i] = c.CallTool(ctx, idemmcp.SetKey(&mcp.CallToolParams{Name: "send_email", Arguments: mail("bo@example.com")}, "batch-7"))
					})
				}
				<-tl.started
				time.Sleep(100 * time.Millisecond) // the others arrive while the first runs
				close(tl.gate)
				wg.Wait()
				replays := 0
				for i := range results {
					require.NoError(t, errs[i])
					assert.Equal(t, "sent msg_1 to bo@example.com", text(results[i]), "caller %d", i)
					if idemmcp.Replayed(results[i]) {
						replays++
					}
				}
				assert.EqualValues(t, 1, tl.runs.Load())
				assert.Equal(t, 15, replays)
			})
		})
	}
}

// A repeat while the first call runs is a tool error saying so; once the
// first call is done, the repeat gets its result.
func TestInProgress(t *testing.T) {
	transports(t, func(t *testing.T, connect func(*mcp.Server) func() *mcp.ClientSession) {
		tl := tools{started: make(chan struct{}, 1), gate: make(chan struct{})}
		conn := connect(tl.server(newMiddleware(t, newStore(t))))
		ctx := ctxTimeout(t, 10*time.Second)
		done := make(chan *mcp.CallToolResult, 1)
		go func() {
			res, err := call(ctx, conn(), "send_email", "k-slow", mail("cy@example.com"))
			assert.NoError(t, err)
			done <- res
		}()
		<-tl.started
		res, err := call(ctx, conn(), "send_email", "k-slow", mail("cy@example.com"))
		require.NoError(t, err)
		assert.True(t, res.IsError)
		assert.Equal(t, idemmcp.RefusedInProgress, idemmcp.Refusal(res))
		assert.Contains(t, text(res), "in progress")
		assert.Contains(t, text(res), "retry")
		close(tl.gate)
		first := <-done
		assert.Equal(t, "sent msg_1 to cy@example.com", text(first))
		res, err = call(ctx, conn(), "send_email", "k-slow", mail("cy@example.com"))
		require.NoError(t, err)
		assert.True(t, idemmcp.Replayed(res))
		assert.Equal(t, withoutReplayMark(t, first), withoutReplayMark(t, res))
		assert.EqualValues(t, 1, tl.runs.Load())
	})
}

// The same key with other arguments is refused, whatever the state of the
// first call; the same arguments spelled differently are the same.
func TestPayloadMismatch(t *testing.T) {
	transports(t, func(t *testing.T, connect func(*mcp.Server) func() *mcp.ClientSession) {
		var tl tools
		conn := connect(tl.server(newMiddleware(t, newStore(t))))
		ctx := ctxTimeout(t, 10*time.Second)
		cs := conn()
		_, err := call(ctx, cs, "send_email", "k-pm", json.RawMessage(`{"to":"di@example.com","body":"hello"}`))
		require.NoError(t, err)

		res, err := call(ctx, cs, "send_email", "k-pm", mail("eve@example.com"))
		require.NoError(t, err)
		assert.True(t, res.IsError)
		assert.Equal(t, idemmcp.RefusedPayloadMismatch, idemmcp.Refusal(res))
		assert.Contains(t, text(res), "other arguments")

		same, err := call(ctx, conn(), "send_email", "k-pm", json.RawMessage(`{ "body" : "hello", "to" : "di@example.com" }`))
		require.NoError(t, err)
		assert.True(t, idemmcp.Replayed(same))
		assert.Equal(t, "sent msg_1 to di@example.com", text(same))
		assert.EqualValues(t, 1, tl.runs.Load())
	})
}

// Without a key a tool runs unguarded; WithRequired refuses it for the
// tools WithTools names, and leaves the others alone.
func TestKeyRequired(t *testing.T) {
	transports(t, func(t *testing.T, connect func(*mcp.Server) func() *mcp.ClientSession) {
		ctx := ctxTimeout(t, 10*time.Second)

		var free tools
		cs := connect(free.server(newMiddleware(t, newStore(t))))()
		for range 2 {
			res, err := call(ctx, cs, "send_email", "", mail("fa@example.com"))
			require.NoError(t, err)
			assert.False(t, res.IsError)
		}
		assert.EqualValues(t, 2, free.runs.Load(), "no key: the tool runs every time")

		var tl tools
		cs = connect(tl.server(newMiddleware(t, newStore(t), idemmcp.WithTools("send_email"), idemmcp.WithRequired())))()
		res, err := call(ctx, cs, "send_email", "", mail("fa@example.com"))
		require.NoError(t, err)
		assert.True(t, res.IsError)
		assert.Equal(t, idemmcp.RefusedKeyRequired, idemmcp.Refusal(res))
		assert.Contains(t, text(res), idemmcp.MetaKey)
		assert.Zero(t, tl.runs.Load())

		for range 2 {
			res, err = call(ctx, cs, "lookup", "", mail("fa@example.com"))
			require.NoError(t, err)
			assert.False(t, res.IsError)
		}
		// Not guarded: a key does nothing.
		for range 2 {
			res, err = call(ctx, cs, "lookup", "k-l", mail("fa@example.com"))
			require.NoError(t, err)
			assert.False(t, idemmcp.Replayed(res))
		}
		assert.EqualValues(t, 4, tl.runs.Load())
	})
}

func TestInvalidKey(t *testing.T) {
	var tl tools
	cs := connectMemory(t, tl.server(newMiddleware(t, newStore(t), idemmcp.WithKeyArgument("key"))))
	ctx := ctxTimeout(t, 10*time.Second)
	for _, p := range []*mcp.CallToolParams{
		idemmcp.SetKey(&mcp.CallToolParams{Name: "send_email", Arguments: mail("x")}, "has space"),
		idemmcp.SetKey(&mcp.CallToolParams{Name: "send_email", Arguments: mail("x")}, ""),
		{Name: "send_email", Arguments: mail("x"), Meta: mcp.Meta{idemmcp.MetaKey: 42}},
		{Name: "send_email", Arguments: map[string]any{"to": "x", "key": 42}},
		idemmcp.SetKey(&mcp.CallToolParams{Name: "send_email", Arguments: map[string]any{"to": "x", "key": "a"}}, "b"),
	} {
		res, err := cs.CallTool(ctx, p)
		require.NoError(t, err)
		assert.Equal(t, idemmcp.RefusedInvalidKey, idemmcp.Refusal(res), "%v", text(res))
	}
	assert.Zero(t, tl.runs.Load())
}

// WithKeyArgument takes the key from the arguments, for keys a model
// writes; the same key in _meta and in the arguments is one key.
func TestKeyArgument(t *testing.T) {
	var tl tools
	cs := connectMemory(t, tl.server(newMiddleware(t, newStore(t), idemmcp.WithKeyArgument("key"))))
	ctx := ctxTimeout(t, 10*time.Second)
	args := map[string]any{"to": "gu@example.com", "body": "hi", "key": "op-9"}
	first, err := call(ctx, cs, "send_email", "", args)
	require.NoError(t, err)
	again, err := call(ctx, cs, "send_email", "", args)
	require.NoError(t, err)
	assert.True(t, idemmcp.Replayed(again))
	both, err := call(ctx, cs, "send_email", "op-9", args)
	require.NoError(t, err)
	assert.True(t, idemmcp.Replayed(both))
	assert.Equal(t, withoutReplayMark(t, first), withoutReplayMark(t, both))
	assert.EqualValues(t, 1, tl.runs.Load())
}

// A tool error is not recorded by default: the retry runs the tool again.
// WithRecordResult records it, and the retry gets the error back.
func TestToolErrors(t *testing.T) {
	ctx := ctxTimeout(t, 10*time.Second)
	var tl tools
	cs := connectMemory(t, tl.server(newMiddleware(t, newStore(t))))
	tl.fail.Store(true)
	res, err := call(ctx, cs, "flaky", "k-f", mail("x"))
	require.NoError(t, err)
	assert.True(t, res.IsError)
	assert.Empty(t, idemmcp.Refusal(res))
	tl.fail.Store(false)
	res, err = call(ctx, cs, "flaky", "k-f", mail("x"))
	require.NoError(t, err)
	assert.Equal(t, "ok run 2", text(res))
	assert.False(t, idemmcp.Replayed(res))

	var rec tools
	cs = connectMemory(t, rec.server(newMiddleware(t, newStore(t), idemmcp.WithRecordResult(func(*mcp.CallToolResult) bool { return true }))))
	rec.fail.Store(true)
	first, err := call(ctx, cs, "flaky", "k-f", mail("x"))
	require.NoError(t, err)
	rec.fail.Store(false)
	again, err := call(ctx, cs, "flaky", "k-f", mail("x"))
	require.NoError(t, err)
	assert.True(t, again.IsError)
	assert.True(t, idemmcp.Replayed(again))
	assert.Equal(t, withoutReplayMark(t, first), withoutReplayMark(t, again))
	assert.EqualValues(t, 1, rec.runs.Load())
}

// A protocol error (an unknown tool) is passed through and not recorded.
func TestProtocolError(t *testing.T) {
	var tl tools
	cs := connectMemory(t, tl.server(newMiddleware(t, newStore(t))))
	for range 2 {
		_, err := call(ctxTimeout(t, 10*time.Second), cs, "no_such_tool", "k-u", mail("x"))
		require.Error(t, err)
		assert.Contains(t, err.Error(), "unknown tool")
	}
}

// ByUser scopes keys by the bearer token's user: one user's key never
// answers another's call, and a user's retry from a new session is
// answered.
func TestScopeByUser(t *testing.T) {
	var tl tools
	s := tl.server(newMiddleware(t, newStore(t), idemmcp.WithScope(idemmcp.ByUser)))
	verify := func(_ context.Context, token string, _ *http.Request) (*auth.TokenInfo, error) {
		if token == "ann-token" || token == "bob-token" {
			return &auth.TokenInfo{UserID: strings.TrimSuffix(token, "-token"), Expiration: time.Now().Add(time.Hour)}, nil
		}
		return nil, auth.ErrInvalidToken
	}
	ts := serveHTTP(t, s, func(h http.Handler) http.Handler { return auth.RequireBearerToken(verify, nil)(h) })
	as := func(token string) *mcp.ClientSession {
		return connectHTTP(t, ts.URL, &http.Client{Transport: bearer{token}})
	}
	ctx := ctxTimeout(t, 10*time.Second)
	ann, err := call(ctx, as("ann-token"), "send_email", "k-1", mail("z@example.com"))
	require.NoError(t, err)
	bob, err := call(ctx, as("bob-token"), "send_email", "k-1", mail("z@example.com"))
	require.NoError(t, err)
	assert.False(t, idemmcp.Replayed(bob))
	assert.NotEqual(t, text(ann), text(bob))
	again, err := call(ctx, as("ann-token"), "send_email", "k-1", mail("z@example.com"))
	require.NoError(t, err)
	assert.True(t, idemmcp.Replayed(again))
	assert.Equal(t, text(ann), text(again))
	assert.EqualValues(t, 2, tl.runs.Load())

	// No authenticated user: refused, the tool not run.
	var anon tools
	cs := connectMemory(t, anon.server(newMiddleware(t, newStore(t), idemmcp.WithScope(idemmcp.ByUser))))
	res, err := call(ctx, cs, "send_email", "k-1", mail("z@example.com"))
	require.NoError(t, err)
	assert.Equal(t, idemmcp.RefusedUnauthenticated, idemmcp.Refusal(res))
	// BySession: the in-memory transport has no session ID.
	cs = connectMemory(t, anon.server(newMiddleware(t, newStore(t), idemmcp.WithScope(idemmcp.BySession))))
	res, err = call(ctx, cs, "send_email", "k-1", mail("z@example.com"))
	require.NoError(t, err)
	assert.Equal(t, idemmcp.RefusedUnauthenticated, idemmcp.Refusal(res))
	assert.Zero(t, anon.runs.Load())
}

// BySession scopes keys by the streamable HTTP session.
func TestScopeBySession(t *testing.T) {
	var tl tools
	ts := serveHTTP(t, tl.server(newMiddleware(t, newStore(t), idemmcp.WithScope(idemmcp.BySession))), nil)
	ctx := ctxTimeout(t, 10*time.Second)
	cs := connectHTTP(t, ts.URL, nil)
	first, err := call(ctx, cs, "send_email", "k-s", mail("s@example.com"))
	require.NoError(t, err)
	again, err := call(ctx, cs, "send_email", "k-s", mail("s@example.com"))
	require.NoError(t, err)
	assert.True(t, idemmcp.Replayed(again))
	assert.Equal(t, text(first), text(again))
	other, err := call(ctx, connectHTTP(t, ts.URL, nil), "send_email", "k-s", mail("s@example.com"))
	require.NoError(t, err)
	assert.False(t, idemmcp.Replayed(other))
	assert.EqualValues(t, 2, tl.runs.Load())
}

type bearer struct{ token string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return http.DefaultTransport.RoundTrip(r)
}

// failingStore fails every operation, as an unreachable store does.
type failingStore struct{ storekit.Store }

var errDown = errors.New("store down")

func (failingStore) Claim(context.Context, storekit.ClaimRequest) (storekit.ClaimResult, error) {
	return storekit.ClaimResult{}, errDown
}

func (failingStore) Get(context.Context, string) (*storekit.Record, error) { return nil, errDown }

// A store failure refuses the call (retry), the tool not run.
func TestStoreDown(t *testing.T) {
	var tl tools
	cs := connectMemory(t, tl.server(newMiddleware(t, failingStore{newStore(t)})))
	res, err := call(ctxTimeout(t, 10*time.Second), cs, "send_email", "k-d", mail("x"))
	require.NoError(t, err)
	assert.Equal(t, idemmcp.RefusedUnavailable, idemmcp.Refusal(res))
	assert.Zero(t, tl.runs.Load())
}

// idem.Raise refuses a repeat of a finished call instead of replaying it.
func TestRaise(t *testing.T) {
	var tl tools
	cs := connectMemory(t, tl.server(newMiddleware(t, newStore(t), idemmcp.WithGuard(idem.OnDuplicate(idem.Raise)))))
	ctx := ctxTimeout(t, 10*time.Second)
	_, err := call(ctx, cs, "send_email", "k-r", mail("x"))
	require.NoError(t, err)
	res, err := call(ctx, cs, "send_email", "k-r", mail("x"))
	require.NoError(t, err)
	assert.Equal(t, idemmcp.RefusedDuplicate, idemmcp.Refusal(res))
	assert.EqualValues(t, 1, tl.runs.Load())
}

// The tool's context carries the claim's fencing token.
func TestFencingToken(t *testing.T) {
	s := mcp.NewServer(&mcp.Implementation{Name: "t", Version: "v1"}, nil)
	var token int64
	mcp.AddTool(s, &mcp.Tool{Name: "fenced"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
		token, _ = idem.FencingToken(ctx)
		return &mcp.CallToolResult{}, nil, nil
	})
	s.AddReceivingMiddleware(newMiddleware(t, newStore(t)).Receiving())
	_, err := call(ctxTimeout(t, 10*time.Second), connectMemory(t, s), "fenced", "k-t", nil)
	require.NoError(t, err)
	assert.EqualValues(t, 1, token)
}
