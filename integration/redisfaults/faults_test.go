package redisfaults_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/redis/go-redis/v9"
)

// faultProxy is an in-process toxiproxy between the client and Redis.
type faultProxy struct {
	t *testing.T
	p *toxiproxy.Proxy
}

func newFaultProxy(t *testing.T, upstream string) *faultProxy {
	t.Helper()
	srv := toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())
	p := toxiproxy.NewProxy(srv, "redis", "127.0.0.1:0", upstream)
	require.NoError(t, p.Start())
	t.Cleanup(p.Stop)
	return &faultProxy{t: t, p: p}
}

func (f *faultProxy) addr() string { return f.p.Listen }

func (f *faultProxy) add(name, typ, stream string, attrs map[string]any) {
	f.t.Helper()
	b, err := json.Marshal(map[string]any{"name": name, "type": typ, "stream": stream, "toxicity": 1.0, "attributes": attrs})
	require.NoError(f.t, err)
	_, err = f.p.Toxics.AddToxicJson(strings.NewReader(string(b)))
	require.NoError(f.t, err)
}

func (f *faultProxy) remove(name string) bool {
	return f.p.Toxics.RemoveToxic(context.Background(), name) == nil
}

// disarmOnDial removes the toxic named "reset" when the client dials, so a
// reset connection's retry goes through on a fresh connection.
type disarmOnDial struct {
	f      *faultProxy
	armed  atomic.Bool
	resets atomic.Int64 // dials that disarmed the toxic
}

func (d *disarmOnDial) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if d.armed.CompareAndSwap(true, false) {
			d.f.remove("reset")
			d.resets.Add(1)
		}
		return next(ctx, network, addr)
	}
}
func (d *disarmOnDial) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (d *disarmOnDial) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (d *disarmOnDial) arm(stream string) {
	d.f.add("reset", "reset_peer", stream, map[string]any{"timeout": 0})
	d.armed.Store(true)
}

// TestFaultResetMidCall cuts the connection in the middle of the claim and
// of the complete, both before the command reaches Redis (upstream) and
// after Redis applied it and before the reply arrives (downstream). go-redis
// retries on a fresh connection; the retried script finds its own nonce, so
// the call succeeds and fn runs exactly once.
func TestFaultResetMidCall(t *testing.T) {
	for _, tc := range []struct{ op, stream string }{
		{"claim", "upstream"}, {"claim", "downstream"}, {"complete", "upstream"}, {"complete", "downstream"},
	} {
		t.Run(tc.op+"/"+tc.stream, func(t *testing.T) {
			ctx := ctxT(t)
			up := standalone(t)
			fp := newFaultProxy(t, up.Options().Addr)
			c := redis.NewClient(&redis.Options{Addr: fp.addr(), PoolSize: 1, MaxRetries: 3})
			defer c.Close()
			d := &disarmOnDial{f: fp}
			c.AddHook(d)
			s := newStore(t, c)
			require.NoError(t, s.LoadScripts(ctx))
			g, err := idem.New[int](s, idem.WithHeartbeat(5*time.Second), idem.WithTakeoverAfter(30*time.Second))
			require.NoError(t, err)

			runs := 0
			if tc.op == "claim" {
				d.arm(tc.stream)
			}
			v, err := g.Do(ctx, "k", func(ctx context.Context) (int, error) {
				runs++
				if tc.op == "complete" {
					d.arm(tc.stream)
				}
				return 7, nil
			})
			require.NoError(t, err)
			assert.Equal(t, 7, v)
			assert.Equal(t, 1, runs)
			assert.EqualValues(t, 1, d.resets.Load(), "the connection was reset and redialled")

			v, err = g.Do(ctx, "k", func(ctx context.Context) (int, error) { runs++; return 0, nil })
			require.NoError(t, err)
			assert.Equal(t, 7, v)
			assert.Equal(t, 1, runs)
			sk, err := guardinfo.StorageKey(g, "k")
			require.NoError(t, err)
			rec, err := s.Get(ctx, sk)
			require.NoError(t, err)
			assert.EqualValues(t, 1, rec.Attempt)
			assert.Equal(t, storekit.StatusCompleted, rec.Status)
		})
	}
}

// TestFaultResetNoRetry: without client retries, a claim whose reply is
// lost surfaces as a wrapped error and fn does not run. Once the network
// is back, the orphaned claim goes stale, a waiter takes it over and the
// key completes, still exactly once, with a higher fencing token.
func TestFaultResetNoRetry(t *testing.T) {
	ctx := ctxT(t)
	up := standalone(t)
	fp := newFaultProxy(t, up.Options().Addr)
	c := redis.NewClient(&redis.Options{Addr: fp.addr(), MaxRetries: -1})
	defer c.Close()
	s := newStore(t, c)
	require.NoError(t, s.LoadScripts(ctx))
	g, err := idem.New[int](s, idem.OnDuplicate(idem.Wait),
		idem.WithHeartbeat(100*time.Millisecond), idem.WithTakeoverAfter(400*time.Millisecond))
	require.NoError(t, err)

	runs := 0
	fn := func(ctx context.Context) (int, error) {
		runs++
		tok, _ := idem.FencingToken(ctx)
		return int(tok), nil
	}
	// A first claim elsewhere, so the store's replica check is done
	// before the fault.
	_, err = s.Claim(ctx, claimReq(storageKey(), "warm-up"))
	require.NoError(t, err)
	fp.add("reset", "reset_peer", "downstream", map[string]any{"timeout": 0})
	_, err = g.Do(ctx, "k", fn)
	require.Error(t, err)
	var se *idem.StoreError
	assert.ErrorAs(t, err, &se, "a store failure is a wrapped *idem.StoreError: %v", err)
	assert.Equal(t, 0, runs)
	require.True(t, fp.remove("reset"))

	// The claim was applied before its reply was lost.
	sk, err := guardinfo.StorageKey(g, "k")
	require.NoError(t, err)
	rec, err := s.Get(ctx, sk)
	require.NoError(t, err)
	assert.Equal(t, storekit.StatusInProgress, rec.Status)

	v, err := g.Do(ctx, "k", fn)
	require.NoError(t, err)
	assert.Equal(t, 1, runs)
	assert.Equal(t, 2, v, "the takeover's fencing token is higher than the orphan's")
}

// TestFaultLatency runs two Guards (two "processes") x 16 goroutines over
// shared keys through a proxy that adds latency with jitter in both
// directions and a spike longer than the heartbeat interval; every key runs
// once and every caller gets its result.
func TestFaultLatency(t *testing.T) {
	ctx := ctxT(t)
	up := standalone(t)
	fp := newFaultProxy(t, up.Options().Addr)
	pfx := redisstore.WithPrefix(prefix())
	fp.add("lat_up", "latency", "upstream", map[string]any{"latency": 5, "jitter": 5})
	fp.add("lat_down", "latency", "downstream", map[string]any{"latency": 10, "jitter": 10})

	var guards []*idem.Guard[string]
	for range 2 {
		c := redis.NewClient(&redis.Options{Addr: fp.addr(), ReadTimeout: 5 * time.Second})
		t.Cleanup(func() { _ = c.Close() })
		s := mustNew(t, c, pfx)
		t.Cleanup(func() { _ = s.Close() })
		g, err := idem.New[string](s, idem.OnDuplicate(idem.Wait),
			idem.WithHeartbeat(100*time.Millisecond), idem.WithTakeoverAfter(3*time.Second))
		require.NoError(t, err)
		guards = append(guards, g)
	}
	const keys = 12
	var mu sync.Mutex
	execs := map[string]int{}
	results := map[string]map[string]bool{}
	go func() {
		time.Sleep(150 * time.Millisecond)
		fp.add("spike", "latency", "downstream", map[string]any{"latency": 400})
		time.Sleep(500 * time.Millisecond)
		fp.remove("spike")
	}()
	var wg sync.WaitGroup
	for gi := range 32 {
		g := guards[gi%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				key := "k" + strconv.Itoa((k+gi)%keys)
				v, err := g.Do(ctx, key, func(ctx context.Context) (string, error) {
					mu.Lock()
					execs[key]++
					mu.Unlock()
					time.Sleep(30 * time.Millisecond)
					return key + "@" + strconv.Itoa(gi), nil
				})
				if !assert.NoError(t, err) {
					continue
				}
				mu.Lock()
				if results[key] == nil {
					results[key] = map[string]bool{}
				}
				results[key][v] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	require.Len(t, execs, keys)
	for k, n := range execs {
		assert.Equal(t, 1, n, "executions of %s", k)
		assert.Len(t, results[k], 1, "results of %s", k)
	}
}

// TestFaultRedisRestart kills the Redis server (SIGKILL) in the middle of a
// run and restarts it (append-only file, fsync always, so acknowledged
// writes survive). Calls during the outage fail with wrapped errors; the
// callers retry, every key completes once the server is back, and no key
// runs twice unless a caller was told ErrNotRecorded (a completion that
// could not be sent before the Guard gave up: true, and the retry runs the
// key again).
func TestFaultRedisRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts a server")
	}
	ctx := ctxT(t)
	srv := testenv.StartRedisAOF(t, 7201)
	guards := restartGuards(t, srv.Addr)
	r := &restartRun{ctx: ctx, execs: map[int]int{}, told: map[int]bool{}, kill: make(chan struct{})}

	restarted := make(chan struct{})
	var outageErr error
	go func() {
		defer close(restarted)
		<-r.kill // a quarter of the keys have run; the rest are in flight or queued
		outageErr = restartServer(ctx, srv)
	}()
	var wg sync.WaitGroup
	for gi := range 16 {
		g := guards[gi%2]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range restartKeys {
				if !r.call(t, g, (k+gi)%restartKeys) {
					return
				}
			}
		}()
	}
	wg.Wait()
	<-restarted
	t.Logf("%d calls failed during the outage", r.failures.Load())
	require.Error(t, outageErr, "a store call during the outage fails")
	assert.Contains(t, outageErr.Error(), "redisstore: get")
	assert.NotErrorIs(t, outageErr, storekit.ErrNotFound)
	assert.Empty(t, r.unwrapped, "every failure is a wrapped store error")
	require.Len(t, r.execs, restartKeys)
	for k, n := range r.execs {
		if r.told[k] {
			assert.LessOrEqual(t, n, 2, "executions of key %d (one caller told ErrNotRecorded)", k)
			continue
		}
		assert.Equal(t, 1, n, "executions of key %d, no caller told ErrNotRecorded", k)
	}
}

// restartKeys is how many keys TestFaultRedisRestart's callers run.
const restartKeys = 40

// restartGuards are two Guards, each on its own client of the server at
// addr, sharing one prefix.
func restartGuards(t *testing.T, addr string) []*idem.Guard[int] {
	pfx := redisstore.WithPrefix(prefix())
	var guards []*idem.Guard[int]
	for range 2 {
		c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: 2, DialTimeout: 200 * time.Millisecond})
		t.Cleanup(func() { _ = c.Close() })
		s := mustNew(t, c, pfx, redisstore.WithWatchTimeout(500*time.Millisecond))
		t.Cleanup(func() { _ = s.Close() })
		g, err := idem.New[int](s, idem.OnDuplicate(idem.Wait),
			idem.WithHeartbeat(200*time.Millisecond), idem.WithTakeoverAfter(4*time.Second))
		require.NoError(t, err)
		guards = append(guards, g)
	}
	return guards
}

// restartServer kills the server and starts it again, and returns the
// error of a store call made while it was down.
func restartServer(ctx context.Context, srv *testenv.RedisServer) error {
	srv.Stop()
	// During the outage a store call fails with a wrapped error.
	oc := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	os, _ := redisstore.New(oc)
	_, err := os.Get(ctx, "idem:outage")
	_ = oc.Close()
	time.Sleep(1500 * time.Millisecond) // well past go-redis's own retries
	srv.Start()
	return err
}

// restartRun is what TestFaultRedisRestart's callers record.
type restartRun struct {
	ctx       context.Context
	mu        sync.Mutex
	execs     map[int]int
	told      map[int]bool // keys whose caller was told ErrNotRecorded
	failures  atomic.Int64
	unwrapped []error
	executed  atomic.Int64
	kill      chan struct{} // closed when a quarter of the keys have run
}

// call runs key through g until it succeeds, and reports false if the
// test's context ended first.
func (r *restartRun) call(t *testing.T, g *idem.Guard[int], key int) bool {
	for {
		v, err := g.Do(r.ctx, "k"+strconv.Itoa(key), func(ctx context.Context) (int, error) {
			r.mu.Lock()
			r.execs[key]++
			r.mu.Unlock()
			if r.executed.Add(1) == restartKeys/4 {
				close(r.kill)
			}
			time.Sleep(20 * time.Millisecond)
			return key, nil
		})
		if err == nil {
			assert.Equal(t, key, v)
			return true
		}
		r.failed(t, key, err)
		if r.ctx.Err() != nil {
			t.Errorf("key %d never completed: %v", key, err)
			return false
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// failed records a failed call of key.
func (r *restartRun) failed(t *testing.T, key int, err error) {
	r.failures.Add(1)
	if errors.Is(err, idem.ErrNotRecorded) {
		// The caller is told its run was not recorded:
		// its retry may run the key again (a completion
		// that could not even be sent during the outage).
		r.mu.Lock()
		r.told[key] = true
		r.mu.Unlock()
		t.Logf("key %d: %v", key, err)
	}
	var se *idem.StoreError
	var nr *storekit.NotRecordedError
	if !errors.As(err, &se) && !errors.As(err, &nr) {
		r.mu.Lock()
		r.unwrapped = append(r.unwrapped, err)
		r.mu.Unlock()
	}
}
