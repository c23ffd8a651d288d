package dynamofaults_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/dynamotest"
	"github.com/idem-go/idem/stores/dynamostore"
)

// faultEnv is a store whose client talks to DynamoDB Local through an
// in-process toxiproxy. Without keep-alive each HTTP request uses a new
// connection (and a toxic's toxicity is drawn per request); with it, a
// toxic is added to the pooled connection the next request uses.
type faultEnv struct {
	*env
	proxy *toxiproxy.Proxy

	mu       sync.Mutex
	cutAt    int    // cut the cutAt-th attempt from now (1 = the next one); 0 = none
	cutKind  string // toxic type: reset_peer or timeout
	attempts int
	cuts     []cut // what happened to each cut attempt
	onCut    func(op string)

	transport *http.Transport // the SDK client's, once built
}

type cut struct {
	op  string
	err error
}

func newFaultEnv(t *testing.T, retries int, keepAlive bool, opts ...dynamostore.Option) *faultEnv {
	t.Helper()
	base := newEnv(t)
	u, err := url.Parse(base.endpoint)
	if err != nil {
		t.Fatal(err)
	}
	server := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(prometheus.NewRegistry()), zerolog.Nop())
	proxy := toxiproxy.NewProxy(server, "dynamodb", "127.0.0.1:0", u.Host)
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(proxy.Stop)
	f := &faultEnv{proxy: proxy, env: &env{endpoint: base.endpoint, log: &dynamotest.RequestLog{}, prefix: base.prefix}}
	httpClient := awshttp.NewBuildableClient().
		WithTimeout(3 * time.Second). // a timeout toxic holds the response forever; generous for a loaded machine
		WithTransportOptions(func(tr *http.Transport) {
			tr.DisableKeepAlives = !keepAlive
			f.transport = tr
		})
	f.client = newClient(clientConfig{
		endpoint: "http://" + proxy.Listen,
		log:      f.log,
		extra: []func(*dynamodb.Options){
			func(o *dynamodb.Options) {
				o.HTTPClient = httpClient
				o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
					so.MaxAttempts = retries
					so.MaxBackoff = 20 * time.Millisecond
					so.RateLimiter = ratelimit.None
				})
				o.APIOptions = append(o.APIOptions, f.attemptMiddleware)
			},
		},
	})
	f.store = mustNew(t, f.client, testTable, append([]dynamostore.Option{dynamostore.WithKeyPrefix(f.prefix)}, opts...)...)
	return f
}

// attemptMiddleware runs once per attempt (after the retry middleware): it
// arms the toxic for the attempt chosen by cutNext and disarms it when that
// attempt returns.
func (f *faultEnv) attemptMiddleware(stack *middleware.Stack) error {
	return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("idemCutConnection",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			f.mu.Lock()
			f.attempts++
			armed := f.cutAt > 0 && f.attempts == f.cutAt
			if armed {
				f.addToxic(f.cutKind, 1)
			}
			f.mu.Unlock()
			out, md, err := next.HandleFinalize(ctx, in)
			if armed {
				f.mu.Lock()
				f.removeToxic()
				// The retry starts on a fresh connection: an idle kept-alive
				// one may still sit behind the toxic being removed.
				if f.transport != nil {
					f.transport.CloseIdleConnections()
				}
				f.cutAt = 0
				op := awsmiddleware.GetOperationName(ctx)
				f.cuts = append(f.cuts, cut{op: op, err: err})
				hook := f.onCut
				f.mu.Unlock()
				if hook != nil {
					hook(op)
				}
			}
			return out, md, err
		}), middleware.After)
}

// cutNext makes the n-th request attempt from now lose its response: the
// request reaches DynamoDB Local and is applied, then the connection is
// reset (reset_peer) or the response is held until the client times out
// (timeout).
func (f *faultEnv) cutNext(n int, kind string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attempts, f.cutAt, f.cutKind = 0, n, kind
}

func (f *faultEnv) takeCuts() []cut {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.cuts
	f.cuts = nil
	return c
}

func (f *faultEnv) addToxic(kind string, toxicity float64) {
	spec := fmt.Sprintf(`{"name":"cut","type":%q,"stream":"downstream","toxicity":%g,"attributes":{"timeout":0}}`, kind, toxicity)
	if _, err := f.proxy.Toxics.AddToxicJson(strings.NewReader(spec)); err != nil {
		panic(err)
	}
}

func (f *faultEnv) removeToxic() {
	if err := f.proxy.Toxics.RemoveToxic(context.Background(), "cut"); err != nil {
		panic(err)
	}
}

func TestConnectionCutMidRequest(t *testing.T) {
	for _, tc := range []cutCase{
		// The connection is reset (RST) when the response arrives.
		{"reset", "reset_peer", false, contains("connection reset")},
		// The response is dropped and the server's close passed on (EOF).
		{"dropped", "timeout", false, contains("EOF")},
		// The response is held on a kept-alive connection until the
		// client's timeout.
		{"hang", "timeout", true, isTimeout},
	} {
		t.Run(tc.name, tc.run)
	}
}

// A cutCase is a way the connection is cut as a response comes back: the
// toxic kind, and what the cut attempt sees.
type cutCase struct {
	name, kind string
	keepAlive  bool
	want       func(error) bool // what the cut attempt saw
}

func (tc cutCase) run(t *testing.T) {
	f := newFaultEnv(t, 3, tc.keepAlive)
	direct := newEnv(t) // same table, no proxy: sees what was applied
	direct.prefix, direct.store = f.prefix, mustNew(t, direct.client, testTable, dynamostore.WithKeyPrefix(f.prefix))
	key := storageKey()
	tc.cutClaim(t, f, direct, key)
	tc.cutOwnerCalls(t, f, direct, key)
	tc.cutGuardedCalls(t, f)
}

// cutClaim checks a claim of key whose response is cut is applied once.
func (tc cutCase) cutClaim(t *testing.T, f *faultEnv, direct *env, key string) {
	t.Helper()
	ctx := context.Background()
	// The claim is applied, its response lost; the SDK's retry finds
	// its own nonce and reports Claimed, attempt 1.
	var applied *storekit.Record
	f.onCut = func(string) { applied, _ = direct.store.Get(ctx, key) }
	f.cutNext(1, tc.kind)
	rec := mustClaim(t, f.store, claimReq(key, "A"), storekit.Claimed)
	f.onCut = nil
	if applied == nil || applied.Nonce != "A" {
		t.Fatalf("the cut claim was not applied before the cut: %+v", applied)
	}
	if rec.Attempt != 1 || rec.Nonce != "A" {
		t.Fatalf("claim after a cut %+v", rec)
	}
	cuts := f.takeCuts()
	if len(cuts) != 1 || cuts[0].err == nil {
		t.Fatalf("cuts %+v", cuts)
	}
	if !tc.want(cuts[0].err) {
		t.Fatalf("the cut attempt failed with %v", cuts[0].err)
	}
	wantOps(t, f.env, "PutItem", "PutItem")
}

// cutOwnerCalls checks a claim of key by another nonce, the owner's
// heartbeat and completion, and a release of another key, each with its
// response cut, answer as if nothing happened.
func (tc cutCase) cutOwnerCalls(t *testing.T, f *faultEnv, direct *env, key string) {
	t.Helper()
	ctx := context.Background()
	f.cutNext(1, tc.kind)
	mustClaim(t, f.store, claimReq(key, "B"), storekit.Existing)
	f.cutNext(1, tc.kind)
	if err := f.store.Heartbeat(ctx, key, "A", time.Minute); err != nil {
		t.Fatalf("heartbeat after a cut: %v", err)
	}
	f.cutNext(1, tc.kind)
	if err := f.store.Complete(ctx, key, "A", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("7"), TTL: time.Hour}); err != nil {
		t.Fatalf("complete after a cut: %v", err)
	}
	if got, err := direct.store.Get(ctx, key); err != nil || got.Status != storekit.StatusCompleted || string(got.Result) != "7" {
		t.Fatalf("completed record %+v, %v", got, err)
	}
	key2 := storageKey()
	mustClaim(t, f.store, claimReq(key2, "A"), storekit.Claimed)
	f.cutNext(1, tc.kind)
	if err := f.store.Release(ctx, key2, "A"); err != nil {
		t.Fatalf("release after a cut: %v", err)
	}
	if cuts := f.takeCuts(); len(cuts) != 4 {
		t.Fatalf("cuts %+v", cuts)
	}
}

// cutGuardedCalls checks guarded calls whose claim, then complete,
// response is cut.
func (tc cutCase) cutGuardedCalls(t *testing.T, f *faultEnv) {
	t.Helper()
	ctx := context.Background()
	// Guarded calls with the claim's, then the complete's, response
	// cut: fn runs once and the outcome is recorded.
	g := newGuard[int](t, f.store)
	for n := 1; n <= 2; n++ {
		runs := 0
		callKey := fmt.Sprint("call-", n)
		f.cutNext(n, tc.kind)
		v, err := g.Do(ctx, callKey, func(context.Context) (int, error) { runs++; return n, nil })
		if err != nil || v != n || runs != 1 {
			t.Fatalf("cut at request %d: %v, %v, fn ran %d times", n, v, err, runs)
		}
		if cuts := f.takeCuts(); len(cuts) != 1 || cuts[0].err == nil {
			t.Fatalf("cut at request %d: %+v", n, cuts)
		}
		v, err = g.Do(ctx, callKey, func(context.Context) (int, error) { runs++; return -1, nil })
		if err != nil || v != n || runs != 1 {
			t.Fatalf("replay after a cut at request %d: %v, %v, fn ran %d times", n, v, err, runs)
		}
	}
}

func contains(s string) func(error) bool {
	return func(err error) bool { return strings.Contains(err.Error(), s) }
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
}

// TestRandomConnectionCutsNoDuplicateExecution resets a quarter of all
// connections after the request went through, under concurrent guarded
// calls on shared keys.
func TestRandomConnectionCutsNoDuplicateExecution(t *testing.T) {
	f := newFaultEnv(t, 15, false)
	f.addToxic("reset_peer", 0.25)
	const (
		workers = 8
		keys    = 10
	)
	var (
		mu         sync.Mutex
		executions = map[string][]int{}
		results    = map[string][]int{}
		errs       atomic.Int64
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			g := newGuard[int](t, f.store, idem.OnDuplicate(idem.Wait))
			for _, k := range rand.Perm(keys) {
				key := fmt.Sprint("key-", k)
				v, err := g.Do(ctx, key, func(context.Context) (int, error) {
					mu.Lock()
					executions[key] = append(executions[key], w)
					mu.Unlock()
					time.Sleep(5 * time.Millisecond)
					return w, nil
				})
				if err != nil {
					errs.Add(1)
					t.Errorf("%s: %v", key, err)
					continue
				}
				mu.Lock()
				results[key] = append(results[key], v)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for k := range keys {
		key := fmt.Sprint("key-", k)
		if len(executions[key]) != 1 {
			t.Errorf("%s ran %d times: %v", key, len(executions[key]), executions[key])
			continue
		}
		for _, v := range results[key] {
			if v != executions[key][0] {
				t.Errorf("%s: a caller got %d, the executor was %d", key, v, executions[key][0])
			}
		}
	}
	ops := f.log.Take()
	if len(ops) == 0 || errors.Is(ctx.Err(), context.DeadlineExceeded) {
		t.Fatal("no requests or timed out")
	}
	t.Logf("%d request attempts through the proxy with 25%% of connections reset after the request; %d keys x %d workers ran once each",
		len(ops), keys, workers)
}
