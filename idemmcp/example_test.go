package idemmcp_test

import (
	"context"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-go/idem/idemmcp"
	"github.com/idem-go/idem/stores/memstore"
)

func Example() {
	ctx := context.Background()
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	m, err := idemmcp.New(store, idemmcp.WithTools("send_email"), idemmcp.WithRequired())
	if err != nil {
		panic(err)
	}

	server := mcp.NewServer(&mcp.Implementation{Name: "mail", Version: "v1"}, nil)
	sent := 0
	type email struct {
		To string `json:"to"`
	}
	mcp.AddTool(server, &mcp.Tool{Name: "send_email"}, func(ctx context.Context, _ *mcp.CallToolRequest, in email) (*mcp.CallToolResult, any, error) {
		sent++
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("e-mail %d sent to %s", sent, in.To)}}}, nil, nil
	})
	server.AddReceivingMiddleware(m.Receiving())

	st, ct := mcp.NewInMemoryTransports()
	if _, err := server.Connect(ctx, st, nil); err != nil {
		panic(err)
	}
	session, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		panic(err)
	}
	defer session.Close()

	// One logical call, sent twice with one key, as a retry sends it.
	params := idemmcp.SetKey(&mcp.CallToolParams{Name: "send_email", Arguments: email{To: "ann@example.com"}}, idemmcp.NewKey())
	for range 2 {
		res, err := session.CallTool(ctx, params)
		if err != nil {
			panic(err)
		}
		fmt.Println(res.Content[0].(*mcp.TextContent).Text, "replayed:", idemmcp.Replayed(res))
	}
	// The same key with other arguments, and no key at all.
	res, _ := session.CallTool(ctx, idemmcp.SetKey(&mcp.CallToolParams{Name: "send_email", Arguments: email{To: "bob@example.com"}}, params.Meta[idemmcp.MetaKey].(string)))
	fmt.Println(idemmcp.Refusal(res))
	res, _ = session.CallTool(ctx, &mcp.CallToolParams{Name: "send_email", Arguments: email{To: "bob@example.com"}})
	fmt.Println(idemmcp.Refusal(res))
	fmt.Println("e-mails sent:", sent)
	// Output:
	// e-mail 1 sent to ann@example.com replayed: false
	// e-mail 1 sent to ann@example.com replayed: true
	// payload_mismatch
	// key_required
	// e-mails sent: 1
}

func ExampleCaller() {
	ctx := context.Background()
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	m, err := idemmcp.New(store)
	if err != nil {
		panic(err)
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "payments", Version: "v1"}, nil)
	charges := 0
	mcp.AddTool(server, &mcp.Tool{Name: "charge"}, func(ctx context.Context, _ *mcp.CallToolRequest, _ any) (*mcp.CallToolResult, any, error) {
		charges++
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("charge ch_%d", charges)}}}, nil, nil
	})
	server.AddReceivingMiddleware(m.Receiving())

	// Session connects on the first attempt and again after a broken one.
	caller := &idemmcp.Caller{Session: func(ctx context.Context, broken *mcp.ClientSession) (*mcp.ClientSession, error) {
		if broken != nil {
			broken.Close()
		}
		st, ct := mcp.NewInMemoryTransports()
		if _, err := server.Connect(ctx, st, nil); err != nil {
			return nil, err
		}
		return mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil).Connect(ctx, ct, nil)
	}}
	// An application's own retry of one operation: one key for both.
	ctx = idemmcp.WithKey(ctx, "order-1042/charge")
	for range 2 {
		res, err := caller.CallTool(ctx, &mcp.CallToolParams{Name: "charge", Arguments: map[string]any{"cents": 1250}})
		if err != nil {
			panic(err)
		}
		fmt.Println(res.Content[0].(*mcp.TextContent).Text, idemmcp.Replayed(res))
	}
	// Output:
	// charge ch_1 false
	// charge ch_1 true
}
