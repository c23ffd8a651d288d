package idemgrpc_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemgrpc"
	"github.com/idem-go/idem/integration/internal/childstore"
	"github.com/idem-go/idem/integration/internal/dropproxy"
	"github.com/idem-go/idem/internal/testenv"
)

// Environment of a server child (the test binary re-executed).
const (
	childEnv   = "IDEMGRPC_TEST_SERVER"  // "file:<dir>" or "redis:<addr>"
	bareEnv    = "IDEMGRPC_TEST_BARE"    // set: no server interceptor
	nsEnv      = "IDEMGRPC_TEST_NS"      // Guard namespace (tenant)
	effectsEnv = "IDEMGRPC_TEST_EFFECTS" // side-effect log, appended to by every child
	hangEnv    = "IDEMGRPC_TEST_HANG"    // set: a request "hang" blocks the handler after its side effect
)

// takeoverAfter is the takeover threshold of children that are killed
// (hangEnv set); their heartbeat is a fifth of it. Children that no test
// kills use liveTakeoverAfter: a live call must never be taken over merely
// because a loaded machine delayed its heartbeats past a short threshold.
const (
	takeoverAfter     = time.Second
	liveTakeoverAfter = 30 * time.Second
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

// serveChild runs one server process: the interceptor over the shared
// store (unless bareEnv is set), in front of a handler whose side effect is
// a line appended to a shared file. It prints its address and serves until
// its stdin closes.
func serveChild(spec string) error {
	store, err := childstore.Open(spec)
	if err != nil {
		return err
	}
	effects, err := os.OpenFile(os.Getenv(effectsEnv), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	var opts []grpc.ServerOption
	if os.Getenv(bareEnv) == "" {
		threshold := liveTakeoverAfter
		if os.Getenv(hangEnv) != "" {
			threshold = takeoverAfter
		}
		ic, err := idemgrpc.New(store,
			idemgrpc.WithMethods(methodCreate),
			idemgrpc.WithPrincipal(func(ctx context.Context) (string, error) {
				md, _ := metadata.FromIncomingContext(ctx)
				if v := md.Get("x-client"); len(v) == 1 && v[0] != "" {
					return v[0], nil
				}
				return "", errors.New("no client")
			}),
			idemgrpc.WithGuard(idem.OnDuplicate(idem.Wait), idem.WithNamespace(os.Getenv(nsEnv), "payments.create"),
				idem.WithTakeoverAfter(threshold), idem.WithHeartbeat(threshold/5)),
		)
		if err != nil {
			return err
		}
		opts = append(opts, grpc.ChainUnaryInterceptor(ic.Unary()))
	}
	var n atomic.Int64
	svc := &service{create: func(ctx context.Context, req *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
		resp := fmt.Sprintf("pay_%d_%d", os.Getpid(), n.Add(1))
		if tok, ok := idem.FencingToken(ctx); ok && req.GetValue() == "hang" {
			resp += fmt.Sprintf("_token%d", tok)
		}
		// The side effect: one line per run, one write(2) with O_APPEND.
		if _, err := effects.Write([]byte(req.GetValue() + "\t" + resp + "\n")); err != nil {
			return nil, status.Error(codes.Internal, err.Error())
		}
		if req.GetValue() == "hang" && os.Getenv(hangEnv) != "" {
			select {} // until killed
		}
		time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond) // widen the window for concurrent retries
		return wrapperspb.String(resp), nil
	}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s := grpc.NewServer(opts...)
	s.RegisterService(&serviceDesc, svc)
	fmt.Printf("ADDR %s\n", ln.Addr())
	go func() { io.Copy(io.Discard, os.Stdin); s.Stop() }()
	return s.Serve(ln)
}

// perAttemptKey mints a new key for every attempt grpc makes (per-RPC
// credentials are asked once per attempt): what stamping a key anywhere
// but around the whole logical call amounts to.
type perAttemptKey struct{}

func (perAttemptKey) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{idemgrpc.KeyMetadata: idemgrpc.NewKey()}, nil
}
func (perAttemptKey) RequireTransportSecurity() bool { return false }

// startServers starts n server processes on one store (a file store in a
// new directory, or the Redis server at redisAddr) and returns them, their
// addresses and the side-effect log's path. env[i] is extra environment
// for server i.
func startServers(t *testing.T, n int, bare bool, redisAddr string, env ...[]string) (addrs []string, effects string, procs []*testenv.Child) {
	dir := t.TempDir()
	effects = dir + "/effects.log"
	spec := "file:" + dir + "/store"
	if redisAddr != "" {
		spec = "redis:" + redisAddr
	}
	ns := fmt.Sprintf("idemgrpc-test-%d-%d", os.Getpid(), rand.Uint64())
	for i := 0; i < n; i++ {
		cfg := testenv.ChildConfig{
			Env:   []string{childEnv + "=" + spec, nsEnv + "=" + ns, effectsEnv + "=" + effects},
			Grace: 20 * time.Second, // a server stops when its stdin closes
		}
		if bare {
			cfg.Env = append(cfg.Env, bareEnv+"=1")
		}
		if i < len(env) {
			cfg.Env = append(cfg.Env, env[i]...)
		}
		c := testenv.StartChild(t, cfg)
		addrs = append(addrs, c.Expect(t, "ADDR ", time.Minute))
		procs = append(procs, c)
	}
	return addrs, effects, procs
}

// TestKilledServerTakeover: a server process killed while its handler runs
// (after the side effect, before the answer) leaves a claim that goes
// stale; the client's retry, on another process, waits for it, takes over
// and runs the handler again with the next fencing token, which the
// handler can hand downstream to refuse the first attempt's late writes.
func TestKilledServerTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns server processes")
	}
	addrs, effects, procs := startServers(t, 2, false, "", []string{hangEnv + "=1"})
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-client", "shop-1")
	ctx = idemgrpc.WithKey(ctx, "order-hang")
	first := dial(t, addrs[0])
	errc := make(chan error, 1)
	go func() {
		errc <- first.Invoke(ctx, methodCreate, wrapperspb.String("hang"), new(wrapperspb.StringValue))
	}()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if runs, _ := readEffects(t, effects); len(runs["hang"]) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first server never ran the handler")
		}
	}
	procs[0].Kill(t)
	if err := <-errc; status.Code(err) != codes.Unavailable {
		t.Errorf("the call to the killed server: %v, want Unavailable", err)
	}
	// The retry, on the other process: it waits until the claim is stale
	// (takeoverAfter without a heartbeat), then runs the handler.
	out := new(wrapperspb.StringValue)
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second+10*takeoverAfter)
	defer cancel()
	if err := dial(t, addrs[1]).Invoke(wctx, methodCreate, wrapperspb.String("hang"), out); err != nil {
		t.Fatal(err)
	}
	runs, _ := readEffects(t, effects)
	if len(runs["hang"]) != 2 || !strings.HasSuffix(runs["hang"][0], "_token1") || !strings.HasSuffix(runs["hang"][1], "_token2") {
		t.Fatalf("runs %q: want one with token 1 (killed) and one with token 2", runs["hang"])
	}
	if out.GetValue() != runs["hang"][1] {
		t.Errorf("the retry got %q, want the second run's %q", out.GetValue(), runs["hang"][1])
	}
	// Answered from now on: a replay.
	var hdr metadata.MD
	again := new(wrapperspb.StringValue)
	if err := dial(t, addrs[1]).Invoke(ctx, methodCreate, wrapperspb.String("hang"), again, grpc.Header(&hdr)); err != nil || again.GetValue() != out.GetValue() || hdr.Get(idemgrpc.ReplayedMetadata) == nil {
		t.Errorf("after the takeover: %q %v %v", again.GetValue(), hdr, err)
	}
}

// readEffects returns, for each logical call, the responses of its runs.
func readEffects(t *testing.T, path string) (runs map[string][]string, total int) {
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	runs = map[string][]string{}
	for _, line := range strings.Split(strings.TrimSuffix(string(data), "\n"), "\n") {
		if line == "" {
			continue
		}
		call, resp, ok := strings.Cut(line, "\t")
		if !ok {
			t.Fatalf("bad effect line %q", line)
		}
		runs[call] = append(runs[call], resp)
		total++
	}
	return runs, total
}

type retryRun struct {
	bareServer     bool    // no server interceptor
	perAttemptKeys bool    // no client interceptor: a new key on every attempt
	shared         bool    // both clients send every logical call, with one key (WithKey); else each call is sent once, keyed by the client interceptor
	drop           float64 // probability that the proxy drops a chunk the server sends
	redis          string  // the Redis server's address, for a Redis store instead of a file store
}

type retryResult struct {
	calls, failed, effects, drops, replays int
	runs                                   map[string][]string
	answers                                map[string][]string // logical call -> responses its clients got
}

const (
	retryProcesses = 4
	retryCalls     = 300
	retryClients   = 2
	retryParallel  = 16 // logical calls in flight at once
)

// runRetries runs retryCalls logical calls from retryClients grpc-go
// clients, whose service config retries UNAVAILABLE and ABORTED, through a
// proxy that drops the server's answers (each chunk with probability
// rr.drop, killing every call on the connection), to retryProcesses server
// processes on one store. A guarded run whose logical calls must all get
// through grpc's own 5 attempts uses a lower rate than the others.
func runRetries(t *testing.T, rr retryRun) retryResult {
	addrs, effects, _ := startServers(t, retryProcesses, rr.bareServer, rr.redis)
	px := dropproxy.Start(t, addrs, rr.drop, true)
	clients := retryClientConns(t, px.Addr(), rr.perAttemptKeys)

	res := retryResult{answers: map[string][]string{}}
	var mu sync.Mutex
	var replays, failed atomic.Int64
	sem := make(chan struct{}, retryParallel)
	var wg sync.WaitGroup
	start := time.Now()
	for k := 0; k < retryCalls; k++ {
		sem <- struct{}{}
		var kw sync.WaitGroup
		for c, cc := range clients {
			if !rr.shared && c != k%len(clients) {
				continue
			}
			wg.Add(1)
			kw.Add(1)
			go func() {
				defer wg.Done()
				defer kw.Done()
				call := fmt.Sprintf("call-%d", k)
				answer, err := rr.logicalCall(cc, k, &replays)
				if err != nil {
					failed.Add(1)
					t.Logf("%s: %v", call, err)
					return
				}
				mu.Lock()
				res.answers[call] = append(res.answers[call], answer)
				mu.Unlock()
			}()
		}
		go func() { kw.Wait(); <-sem }()
	}
	wg.Wait()
	elapsed := time.Since(start)
	res.runs, res.effects = readEffects(t, effects)
	res.calls, res.failed, res.drops, res.replays = retryCalls, int(failed.Load()), int(px.Drops()), int(replays.Load())
	t.Logf("store %s, server interceptor %v, client %s, shared keys %v: %d logical calls x %d clients via %d processes in %v: %d side effects, %d failed calls, %d answers dropped by the proxy, %d replayed responses",
		map[bool]string{true: "redis", false: "file"}[rr.redis != ""], !rr.bareServer, map[bool]string{true: "per-attempt keys", false: "interceptor"}[rr.perAttemptKeys], rr.shared,
		retryCalls, retryClients, retryProcesses, elapsed.Round(time.Millisecond), res.effects, res.failed, res.drops, res.replays)
	if res.drops == 0 {
		t.Error("the proxy dropped nothing: the run proved nothing about retries")
	}
	return res
}

// retryClientConns are retryClients connections to addr, retrying as
// grpc's service config says, with a key per attempt or the client
// interceptor's.
func retryClientConns(t *testing.T, addr string, perAttemptKeys bool) []*grpc.ClientConn {
	var clients []*grpc.ClientConn
	for c := 0; c < retryClients; c++ {
		opts := []grpc.DialOption{
			grpc.WithDefaultServiceConfig(retryConfig(5)),
			grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1.6, MaxDelay: 100 * time.Millisecond}, MinConnectTimeout: 10 * time.Second}),
		}
		if perAttemptKeys {
			opts = append(opts, grpc.WithPerRPCCredentials(perAttemptKey{}))
		} else {
			opts = append(opts, grpc.WithUnaryInterceptor(idemgrpc.UnaryClientInterceptor()))
		}
		clients = append(clients, dial(t, addr, opts...))
	}
	return clients
}

// logicalCall makes logical call k on cc, counting replayed answers, and
// calls again when grpc gave up on a lost answer if rr.shared.
func (rr retryRun) logicalCall(cc *grpc.ClientConn, k int, replays *atomic.Int64) (string, error) {
	call := fmt.Sprintf("call-%d", k)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-client", "shop-1")
	if rr.shared {
		ctx = idemgrpc.WithKey(ctx, fmt.Sprintf("order-%d", k)) // one key per logical call, the same for both clients
	}
	var out *wrapperspb.StringValue
	var err error
	for try := 0; ; try++ {
		var hdr metadata.MD
		out = new(wrapperspb.StringValue)
		err = cc.Invoke(ctx, methodCreate, wrapperspb.String(call), out, grpc.Header(&hdr))
		if err == nil && hdr.Get(idemgrpc.ReplayedMetadata) != nil {
			replays.Add(1)
		}
		// With a key of its own, the application may call
		// again when grpc gave up (an answer lost after its
		// headers arrived is not retried by grpc, and may
		// surface as a bare EOF); a key the interceptor minted
		// dies with the logical call.
		lostAnswer := status.Code(err) == codes.Unavailable || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
		if err == nil || !rr.shared || try == 20 || !lostAnswer {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return out.GetValue(), err
}

// TestRetriesAcrossProcesses: real grpc-go clients with a service-config
// retry policy call 4 server processes on one file store through a proxy
// that drops answers after the server sent them.
//
// "shared": both clients send each of the 300 logical calls, with one
// key (WithKey); every call's side effect happens exactly once (300) and
// every client gets that run's response. Without the server interceptor the
// same run counts more.
//
// "shared-redis": the guarded "shared" run on a Redis store.
//
// "stamped": each logical call is sent once, keyed by the client
// interceptor; the key survives grpc's own retries, so each call that
// returned ran exactly once. With a key minted per attempt instead (no
// client interceptor) the same run counts more.
func TestRetriesAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns server processes")
	}
	exact := func(t *testing.T, r retryResult, shared bool) {
		for k := 0; k < r.calls; k++ {
			call := fmt.Sprintf("call-%d", k)
			runs := r.runs[call]
			if len(runs) > 1 {
				t.Errorf("%s: the side effect ran %d times, want once", call, len(runs))
				continue
			}
			for _, a := range r.answers[call] {
				if len(runs) != 1 || a != runs[0] {
					t.Errorf("%s: answered %q, but its runs were %q", call, a, runs)
				}
			}
			if shared && len(r.answers[call]) != retryClients {
				t.Errorf("%s: %d of %d clients got an answer", call, len(r.answers[call]), retryClients)
			}
		}
	}
	t.Run("shared", func(t *testing.T) {
		guarded := runRetries(t, retryRun{shared: true, drop: 0.2})
		exact(t, guarded, true)
		if guarded.effects != retryCalls {
			t.Errorf("%d side effects, want %d", guarded.effects, retryCalls)
		}
		bare := runRetries(t, retryRun{shared: true, bareServer: true, drop: 0.2})
		t.Logf("side effects for %d logical calls: %d with the server interceptor, %d without", retryCalls, guarded.effects, bare.effects)
		if bare.effects <= retryCalls {
			t.Errorf("without the server interceptor: %d side effects; the run cannot tell a guarded server from a bare one", bare.effects)
		}
	})
	// The guarded run again, on Redis.
	t.Run("shared-redis", func(t *testing.T) {
		addr := testenv.RedisAddr(t)
		c := redis.NewClient(&redis.Options{Addr: addr})
		defer c.Close()
		if err := c.Ping(context.Background()).Err(); err != nil {
			testenv.Missing(t, "redis at "+addr+": "+err.Error())
		}
		guarded := runRetries(t, retryRun{shared: true, drop: 0.2, redis: addr})
		exact(t, guarded, true)
		if guarded.effects != retryCalls {
			t.Errorf("%d side effects, want %d", guarded.effects, retryCalls)
		}
	})
	t.Run("stamped", func(t *testing.T) {
		guarded := runRetries(t, retryRun{drop: 0.05})
		exact(t, guarded, false)
		// Every call that returned ran once; one that failed (its answer
		// lost after grpc committed to it) ran at most once.
		if want := retryCalls - guarded.failed; guarded.effects < want || guarded.effects > retryCalls {
			t.Errorf("%d side effects for %d answered calls and %d failed", guarded.effects, want, guarded.failed)
		}
		perAttempt := runRetries(t, retryRun{perAttemptKeys: true, drop: 0.2})
		t.Logf("side effects for %d logical calls: %d with the client interceptor, %d with a key per attempt", retryCalls, guarded.effects, perAttempt.effects)
		if perAttempt.effects <= retryCalls {
			t.Errorf("with a key per attempt: %d side effects; the run cannot tell the client interceptor from none", perAttempt.effects)
		}
	})
}
