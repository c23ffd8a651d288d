// Command mcp-mail is an MCP server whose send_email tool sends each
// e-mail once, however often an agent retries the call: idemmcp guards the
// tool, with its records in a directory (stores/filestore) that the
// server's processes share. An agent, in the same program, calls the tool
// over streamable HTTP, and a second connection retries the call with the
// same key, as an agent does after a timeout:
//
//	go run ./examples/mcp-mail
package main

import (
	"context"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-go/idem/idemmcp"
	"github.com/idem-go/idem/stores/filestore"
)

// Email is the send_email tool's input.
type Email struct {
	To      string `json:"to"`
	Subject string `json:"subject"`
}

func main() {
	if err := run(context.Background()); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error {
	dir, err := os.MkdirTemp("", "mcp-mail-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	store, err := filestore.New(dir)
	if err != nil {
		return err
	}
	defer store.Close()
	var sent atomic.Int64
	url, stop, err := serve(store, &sent)
	if err != nil {
		return err
	}
	defer stop()

	// The agent: one logical call, and a retry of it on a new connection,
	// both with the key the first attempt was given.
	params := idemmcp.SetKey(&mcp.CallToolParams{Name: "send_email", Arguments: Email{To: "ann@example.com", Subject: "Your order"}}, idemmcp.NewKey())
	for attempt := 1; attempt <= 2; attempt++ {
		session, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v1"}, nil).
			Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
		if err != nil {
			return err
		}
		res, err := session.CallTool(ctx, params)
		_ = session.Close()
		if err != nil {
			return err
		}
		fmt.Printf("attempt %d: %s (replayed: %v)\n", attempt, res.Content[0].(*mcp.TextContent).Text, idemmcp.Replayed(res))
	}
	fmt.Println("e-mails sent:", sent.Load())
	return nil
}

// serve starts the MCP server on a loopback port, its send_email tool
// guarded by idemmcp over store; it returns the server's URL.
func serve(store *filestore.Store, sent *atomic.Int64) (url string, stop func(), err error) {
	m, err := idemmcp.New(store, idemmcp.WithTools("send_email"), idemmcp.WithRequired())
	if err != nil {
		return "", nil, err
	}
	server := mcp.NewServer(&mcp.Implementation{Name: "mail", Version: "v1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "send_email", Description: "Sends an e-mail once per idempotency key"},
		func(ctx context.Context, _ *mcp.CallToolRequest, in Email) (*mcp.CallToolResult, any, error) {
			n := sent.Add(1)
			text := fmt.Sprintf("e-mail %d sent to %s", n, in.To)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}}, nil, nil
		})
	server.AddReceivingMiddleware(m.Receiving())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	hs := &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)}
	go func() { _ = hs.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = hs.Close() }, nil
}
