package idemhttp_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/integration/internal/childstore"
	"github.com/idem-go/idem/integration/internal/dropproxy"
	"github.com/idem-go/idem/internal/testenv"
)

// Environment of a server child (the test binary re-executed).
const (
	childEnv   = "IDEMHTTP_TEST_SERVER"  // "file:<dir>" or "redis:<addr>"
	nsEnv      = "IDEMHTTP_TEST_NS"      // Guard namespace (tenant)
	effectsEnv = "IDEMHTTP_TEST_EFFECTS" // side-effect log, appended to by every child
	returnEnv  = "IDEMHTTP_TEST_RETURN"  // set: duplicates get a 409 (idem.Return) instead of waiting
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(childEnv); spec != "" {
		if err := serveChild(spec); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// serveChild runs one server process: the middleware over the shared store,
// in front of a handler whose side effect is a line appended to a shared
// file. It prints its address and serves until its stdin closes.
func serveChild(spec string) error {
	store, err := childstore.Open(spec)
	if err != nil {
		return err
	}
	effects, err := os.OpenFile(os.Getenv(effectsEnv), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	dup := idem.OnDuplicate(idem.Wait)
	if os.Getenv(returnEnv) != "" {
		dup = idem.OnDuplicate(idem.Return)
	}
	m, err := idemhttp.New(store,
		idemhttp.WithRequired(),
		idemhttp.WithPrincipal(func(r *http.Request) (string, error) {
			if c := r.Header.Get("X-Client"); c != "" {
				return c, nil
			}
			return "", errors.New("no client")
		}),
		idemhttp.WithGuard(dup, idem.WithNamespace(os.Getenv(nsEnv), "payments.create")),
	)
	if err != nil {
		return err
	}
	var n atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		key := r.Header.Get("Idempotency-Key")
		tok, _ := idem.FencingToken(r.Context())
		resp := fmt.Sprintf(`{"payment":"pay_%d_%d","token":%d,"request":%q}`, os.Getpid(), n.Add(1), tok, body)
		// The side effect: one line per run, one write(2) with O_APPEND.
		if _, err := effects.Write([]byte(key + "\t" + resp + "\n")); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond) // widen the window for concurrent retries
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, resp)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("ADDR %s\n", ln.Addr())
	go func() { io.Copy(io.Discard, os.Stdin); ln.Close() }()
	err = (&http.Server{Handler: m.Handler(h)}).Serve(ln)
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// TestRetryingClientAcrossProcesses: a real retrying client
// (hashicorp/go-retryablehttp) sends POSTs with Idempotency-Key through a
// proxy that drops a third of the answers after the server sent them, to 4
// server processes sharing one store; two clients send each key at once.
// Every key's side effect happens exactly once and every client gets that
// run's response body.
func TestRetryingClientAcrossProcesses(t *testing.T) {
	t.Run("file", func(t *testing.T) {
		runRetryingClients(t, "file:"+t.TempDir()+"/store", false)
	})
	// Without Wait, a duplicate that arrives while the first request runs
	// gets a 409 with Retry-After, and the client retries it until the
	// answer is recorded.
	t.Run("file-409-retried", func(t *testing.T) {
		runRetryingClients(t, "file:"+t.TempDir()+"/store", true)
	})
	t.Run("redis", func(t *testing.T) {
		addr := testenv.RedisAddr(t)
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		if err := c.Ping(context.Background()).Err(); err != nil {
			testenv.Missing(t, "redis at "+addr+": "+err.Error())
		}
		runRetryingClients(t, "redis:"+addr, false)
	})
}

// The shape of the load runRetryingClients sends.
const (
	processes = 4
	perKey    = 2
	parallel  = 16 // keys in flight at once
)

// A clientResult is what one client got for its key, after its retries.
type clientResult struct {
	status   int
	body     string
	replayed bool
	err      error
}

func runRetryingClients(t *testing.T, spec string, conflicts bool) {
	keys := 300
	if conflicts {
		keys = 200 // a second run on the file store: fewer keys, to keep the test short
	}
	effects := t.TempDir() + "/effects.log"
	px := dropproxy.Start(t, startPaymentServers(t, spec, effects, conflicts), 0.33, false)

	var conflictsSeen atomic.Int64
	client := retryingClient(conflicts, &conflictsSeen)
	start := time.Now()
	results := sendPayments(client, px.Addr(), keys)
	elapsed := time.Since(start)
	client.HTTPClient.CloseIdleConnections()

	data, err := os.ReadFile(effects)
	if err != nil {
		t.Fatal(err)
	}
	replays := checkEffectsOnce(t, string(data), results)
	t.Logf("%s: %d keys x %d clients via %d processes in %v: %d side effects, %d answers dropped by the proxy, %d replayed responses",
		strings.SplitN(spec, ":", 2)[0], keys, perKey, processes, elapsed.Round(time.Millisecond), len(strings.Split(strings.TrimSpace(string(data)), "\n")), px.Drops(), replays)
	if px.Drops() == 0 {
		t.Error("the proxy dropped nothing: the test proved nothing about retries")
	}
	if conflicts {
		t.Logf("%d answers were a 409 in progress, retried", conflictsSeen.Load())
		if conflictsSeen.Load() == 0 {
			t.Error("no duplicate ever found its key in progress: the test proved nothing about 409")
		}
	}
}

// startPaymentServers starts the server processes on the store spec, in a
// namespace of their own, logging their side effects to effects, and
// returns their addresses.
func startPaymentServers(t *testing.T, spec, effects string, conflicts bool) []string {
	ns := fmt.Sprintf("idemhttp-test-%d-%d", os.Getpid(), rand.Uint64())
	var addrs []string
	for i := 0; i < processes; i++ {
		cfg := testenv.ChildConfig{
			Env:   []string{childEnv + "=" + spec, nsEnv + "=" + ns, effectsEnv + "=" + effects},
			Grace: 10 * time.Second, // a server stops when its stdin closes
		}
		if conflicts {
			cfg.Env = append(cfg.Env, returnEnv+"=1")
		}
		addrs = append(addrs, testenv.StartChild(t, cfg).Expect(t, "ADDR ", time.Minute))
	}
	return addrs
}

// retryingClient is a client that retries dropped answers, and with
// conflicts a 409 in progress too, counting those in conflictsSeen.
func retryingClient(conflicts bool, conflictsSeen *atomic.Int64) *retryablehttp.Client {
	client := retryablehttp.NewClient()
	client.Logger = nil
	client.RetryMax = 30
	client.RetryWaitMin = 2 * time.Millisecond
	client.RetryWaitMax = 50 * time.Millisecond
	if conflicts {
		// A 409 in progress is worth retrying: the draft's answer to a
		// request sent while the same one runs.
		client.CheckRetry = func(ctx context.Context, resp *http.Response, err error) (bool, error) {
			if err == nil && resp.StatusCode == http.StatusConflict && resp.Header.Get("Retry-After") != "" {
				conflictsSeen.Add(1)
				return true, nil
			}
			return retryablehttp.DefaultRetryPolicy(ctx, resp, err)
		}
	}
	client.HTTPClient.Timeout = 20 * time.Second
	client.HTTPClient.Transport.(*http.Transport).MaxIdleConnsPerHost = parallel * perKey
	return client
}

// sendPayments sends each of keys payments from perKey clients at once,
// parallel keys in flight, through the proxy at addr.
func sendPayments(client *retryablehttp.Client, addr string, keys int) [][]clientResult {
	results := make([][]clientResult, keys)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for k := 0; k < keys; k++ {
		results[k] = make([]clientResult, perKey)
		sem <- struct{}{}
		var kw sync.WaitGroup
		for c := 0; c < perKey; c++ {
			wg.Add(1)
			kw.Add(1)
			go func() {
				defer wg.Done()
				defer kw.Done()
				results[k][c] = sendPayment(client, addr, k)
			}()
		}
		go func() { kw.Wait(); <-sem }()
	}
	wg.Wait()
	return results
}

// sendPayment sends the payment of key k once, retrying as client does.
func sendPayment(client *retryablehttp.Client, addr string, k int) clientResult {
	req, err := retryablehttp.NewRequest("POST", "http://"+addr+"/payments",
		[]byte(fmt.Sprintf(`{"amount":%d,"currency":"EUR"}`, 100+k)))
	if err != nil {
		return clientResult{err: err}
	}
	req.Header.Set("Idempotency-Key", fmt.Sprintf(`"key-%d"`, k))
	req.Header.Set("X-Client", "client-1")
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return clientResult{err: err}
	}
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return clientResult{status: resp.StatusCode, body: string(b), replayed: resp.Header.Get(idemhttp.ReplayedHeader) == "true", err: err}
}

// checkEffectsOnce checks the side effect log data has each key run once,
// and every client got that run's answer, and returns how many answers
// were replays.
func checkEffectsOnce(t *testing.T, data string, results [][]clientResult) int {
	t.Helper()
	runs := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSuffix(data, "\n"), "\n") {
		key, body, ok := strings.Cut(line, "\t")
		if !ok {
			t.Fatalf("bad effect line %q", line)
		}
		runs[key] = append(runs[key], body)
	}
	replays := 0
	for k := range results {
		key := fmt.Sprintf(`"key-%d"`, k)
		if len(runs[key]) != 1 {
			t.Errorf("%s: the side effect ran %d times, want once", key, len(runs[key]))
			continue
		}
		for c, r := range results[k] {
			if r.err != nil || r.status != http.StatusCreated || r.body != runs[key][0] {
				t.Errorf("%s client %d: %d %q %v; want 201 %q", key, c, r.status, r.body, r.err, runs[key][0])
			}
			if r.replayed {
				replays++
			}
		}
	}
	if len(runs) != len(results) {
		t.Errorf("%d keys ran, want %d", len(runs), len(results))
	}
	return replays
}
