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

func runRetryingClients(t *testing.T, spec string, conflicts bool) {
	const (
		processes = 4
		perKey    = 2
		parallel  = 16 // keys in flight at once
	)
	keys := 300
	if conflicts {
		keys = 200 // a second run on the file store: fewer keys, to keep the test short
	}
	effects := t.TempDir() + "/effects.log"
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
	px := dropproxy.Start(t, addrs, 0.33, false)

	client := retryablehttp.NewClient()
	client.Logger = nil
	client.RetryMax = 30
	client.RetryWaitMin = 2 * time.Millisecond
	client.RetryWaitMax = 50 * time.Millisecond
	var conflictsSeen atomic.Int64
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

	type result struct {
		status   int
		body     string
		replayed bool
		err      error
	}
	results := make([][]result, keys)
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	start := time.Now()
	for k := 0; k < keys; k++ {
		results[k] = make([]result, perKey)
		sem <- struct{}{}
		var kw sync.WaitGroup
		for c := 0; c < perKey; c++ {
			wg.Add(1)
			kw.Add(1)
			go func() {
				defer wg.Done()
				defer kw.Done()
				req, err := retryablehttp.NewRequest("POST", "http://"+px.Addr()+"/payments",
					[]byte(fmt.Sprintf(`{"amount":%d,"currency":"EUR"}`, 100+k)))
				if err != nil {
					results[k][c].err = err
					return
				}
				req.Header.Set("Idempotency-Key", fmt.Sprintf(`"key-%d"`, k))
				req.Header.Set("X-Client", "client-1")
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					results[k][c].err = err
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				results[k][c] = result{status: resp.StatusCode, body: string(b), replayed: resp.Header.Get(idemhttp.ReplayedHeader) == "true", err: err}
			}()
		}
		go func() { kw.Wait(); <-sem }()
	}
	wg.Wait()
	elapsed := time.Since(start)
	client.HTTPClient.CloseIdleConnections()

	data, err := os.ReadFile(effects)
	if err != nil {
		t.Fatal(err)
	}
	runs := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		key, body, ok := strings.Cut(line, "\t")
		if !ok {
			t.Fatalf("bad effect line %q", line)
		}
		runs[key] = append(runs[key], body)
	}
	replays := 0
	for k := 0; k < keys; k++ {
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
	if len(runs) != keys {
		t.Errorf("%d keys ran, want %d", len(runs), keys)
	}
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
