package idemmcp_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-go/idem/idemmcp"
	"github.com/idem-go/idem/stores/storetest"
)

var benchArgs = json.RawMessage(`{"to":"ann@example.com","body":"Your invoice 1042 of 12.50 EUR is attached."}`)

var sink mcp.Result

func benchTool(context.Context, string, mcp.Request) (mcp.Result, error) {
	sink = &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "sent msg_1 to ann@example.com"}}}
	return sink, nil
}

// instrumented is a memory store that counts its operations, reported as
// store-ops/op: the store round trips a call costs.
func instrumented(b testing.TB) *storetest.Instrumented {
	return storetest.Instrument(newStore(b))
}

func reportOps(b *testing.B, st *storetest.Instrumented) {
	b.ReportMetric(float64(st.Total())/float64(b.N), "store-ops/op")
}

// BenchmarkMiddleware: the cost of one tools/call through the middleware
// on a memory store, called directly (no transport): bare is the tool
// alone, fresh a new key every call (claim, tool, record, complete: two
// store round trips), replay the same key (one read, one decode).
func BenchmarkMiddleware(b *testing.B) {
	req := func(key string) *mcp.CallToolRequest {
		return &mcp.CallToolRequest{Params: &mcp.CallToolParamsRaw{
			Name: "send_email", Arguments: benchArgs, Meta: mcp.Meta{idemmcp.MetaKey: key},
		}}
	}
	ctx := context.Background()
	b.Run("bare", func(b *testing.B) {
		r := req("k")
		b.ReportAllocs()
		for b.Loop() {
			if _, err := benchTool(ctx, "tools/call", r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fresh", func(b *testing.B) {
		st := instrumented(b)
		h := newMiddleware(b, st).Receiving()(benchTool)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			i++
			if _, err := h(ctx, "tools/call", req("key-"+strconv.Itoa(i))); err != nil {
				b.Fatal(err)
			}
		}
		reportOps(b, st)
	})
	b.Run("replay", func(b *testing.B) {
		st := instrumented(b)
		h := newMiddleware(b, st).Receiving()(benchTool)
		r := req("k")
		if _, err := h(ctx, "tools/call", r); err != nil {
			b.Fatal(err)
		}
		st.Reset()
		b.ReportAllocs()
		for b.Loop() {
			res, err := h(ctx, "tools/call", r)
			if err != nil || !idemmcp.Replayed(res.(*mcp.CallToolResult)) {
				b.Fatal(res, err)
			}
		}
		reportOps(b, st)
	})
}

// BenchmarkTransport: the same three through the SDK's client and server,
// over the in-memory transport and over streamable HTTP on loopback, to set
// the middleware's cost against a tool call's.
func BenchmarkTransport(b *testing.B) {
	for _, tr := range []string{"memory", "http"} {
		b.Run(tr, func(b *testing.B) {
			run := func(b *testing.B, m *idemmcp.Middleware, key func(i int) string) {
				var tl tools
				s := tl.server(m)
				var cs *mcp.ClientSession
				if tr == "memory" {
					cs = connectMemory(b, s)
				} else {
					cs = connectHTTP(b, serveHTTP(b, s, nil).URL, nil)
				}
				ctx := context.Background()
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					i++
					p := &mcp.CallToolParams{Name: "send_email", Arguments: benchArgs}
					if k := key(i); k != "" {
						p = idemmcp.SetKey(p, k)
					}
					res, err := cs.CallTool(ctx, p)
					if err != nil || res.IsError {
						b.Fatal(res, err)
					}
				}
			}
			b.Run("bare", func(b *testing.B) { run(b, nil, func(int) string { return "" }) })
			b.Run("fresh", func(b *testing.B) {
				st := instrumented(b)
				run(b, newMiddleware(b, st), func(i int) string { return "key-" + strconv.Itoa(i) })
				reportOps(b, st)
			})
			b.Run("replay", func(b *testing.B) {
				st := instrumented(b)
				run(b, newMiddleware(b, st), func(int) string { return "k" })
				reportOps(b, st)
			})
		})
	}
}
