package idemmcp_test

// TestTwoProcesses re-executes the test binary as two MCP servers; TestMain
// sees serverEnv and serves instead of running the tests.

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/idemmcp"
	"github.com/idem-go/idem/stores/filestore"
)

const serverEnv = "IDEMMCP_TEST_SERVER" // the store directory

func TestMain(m *testing.M) {
	if dir := os.Getenv(serverEnv); dir != "" {
		if err := serveProcess(dir); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveProcess serves send_email over streamable HTTP on a loopback port,
// its records in a filestore in dir; each run of the tool appends a line
// to dir/runs. It prints its address, and serves until stdin closes.
func serveProcess(dir string) error {
	store, err := filestore.New(filepath.Join(dir, "store"))
	if err != nil {
		return err
	}
	m, err := idemmcp.New(store)
	if err != nil {
		return err
	}
	s := mcp.NewServer(&mcp.Implementation{Name: "mail", Version: "v1"}, nil)
	mcp.AddTool(s, &mcp.Tool{Name: "send_email"}, func(ctx context.Context, _ *mcp.CallToolRequest, in emailIn) (*mcp.CallToolResult, any, error) {
		f, err := os.OpenFile(filepath.Join(dir, "runs"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		if err != nil {
			return nil, nil, err
		}
		defer f.Close()
		if _, err := fmt.Fprintf(f, "%d %s\n", os.Getpid(), in.To); err != nil {
			return nil, nil, err
		}
		time.Sleep(300 * time.Millisecond) // the other calls arrive while it runs
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("sent to %s by process %d", in.To, os.Getpid())}}}, nil, nil
	})
	s.AddReceivingMiddleware(m.Receiving())
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)}
	go srv.Serve(ln)
	fmt.Printf("http://%s\n", ln.Addr())
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // EOF when the parent goes
	return srv.Close()
}

// startServer starts a server process sharing dir and returns its URL.
func startServer(t *testing.T, dir string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), serverEnv+"="+dir)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			t.Errorf("server process: %v", err)
		}
	})
	url, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err)
	return strings.TrimSpace(url)
}

// Two server processes share a filestore; 16 clients, half on each, call
// send_email with one key at once. The tool runs once, in one of them, and
// every client gets its result.
func TestTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two server processes")
	}
	dir := t.TempDir()
	urls := []string{startServer(t, dir), startServer(t, dir)}
	ctx := ctxTimeout(t, 30*time.Second)
	results := make([]*mcp.CallToolResult, 16)
	errs := make([]error, 16)
	var wg sync.WaitGroup
	for i := range results {
		cs := connectHTTP(t, urls[i%2], nil)
		wg.Go(func() {
			c := &idemmcp.Caller{
				Session:  func(context.Context, *mcp.ClientSession) (*mcp.ClientSession, error) { return cs, nil },
				Attempts: 40, Backoff: 20 * time.Millisecond,
			}
			results[i], errs[i] = c.CallTool(ctx, idemmcp.SetKey(&mcp.CallToolParams{Name: "send_email", Arguments: mail("hal@example.com")}, "invoice-77"))
		})
	}
	wg.Wait()
	replays := 0
	for i := range results {
		require.NoError(t, errs[i], "client %d", i)
		assert.Equal(t, text(results[0]), text(results[i]), "client %d", i)
		if idemmcp.Replayed(results[i]) {
			replays++
		}
	}
	assert.Contains(t, text(results[0]), "sent to hal@example.com by process ")
	assert.Equal(t, 15, replays)
	runs, err := os.ReadFile(filepath.Join(dir, "runs"))
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(string(runs), "\n"), "runs:\n%s", runs)
}

// Two servers in one process, each with its own Middleware, share a store:
// a call answered by one is replayed by the other.
func TestTwoServersOneStore(t *testing.T) {
	store := newStore(t)
	var a, b tools
	csA := connectMemory(t, a.server(newMiddleware(t, store)))
	csB := connectMemory(t, b.server(newMiddleware(t, store)))
	ctx := ctxTimeout(t, 10*time.Second)
	first, err := call(ctx, csA, "send_email", "k-2s", mail("ivy@example.com"))
	require.NoError(t, err)
	again, err := call(ctx, csB, "send_email", "k-2s", mail("ivy@example.com"))
	require.NoError(t, err)
	assert.True(t, idemmcp.Replayed(again))
	assert.Equal(t, withoutReplayMark(t, first), withoutReplayMark(t, again))
	assert.EqualValues(t, 1, a.runs.Load())
	assert.Zero(t, b.runs.Load())
}
