package isr_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/body"
	"github.com/idem-go/idem/isr/internal/isrtesting"
	"github.com/idem-go/idem/isr/isrtest"
	"github.com/idem-go/idem/stores/storetest"
)

// pages is a PageFunc that counts its renders and can hold a render until
// the test lets it go.
type pages struct {
	renders atomic.Int64
	mu      sync.Mutex
	hold    chan struct{} // when non-nil, renders wait for it to close
	started chan struct{} // receives one value per render that starts
	err     error
	prefix  string
}

func newPages() *pages { return &pages{started: make(chan struct{}, 1024), prefix: "v"} }

func (p *pages) render(ctx context.Context, tenant, key string) ([]byte, string, error) {
	n := p.renders.Add(1)
	p.mu.Lock()
	hold, err := p.hold, p.err
	p.mu.Unlock()
	p.started <- struct{}{}
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, "", ctx.Err()
		}
	}
	if err != nil {
		return nil, "", err
	}
	return []byte(fmt.Sprintf("%s%d %s", p.prefix, n, key)), "text/html; charset=utf-8", nil
}

// holdRenders makes the next renders wait; the returned func releases them.
func (p *pages) holdRenders() func() {
	ch := make(chan struct{})
	p.mu.Lock()
	p.hold = ch
	p.mu.Unlock()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(ch)
			p.mu.Lock()
			p.hold = nil
			p.mu.Unlock()
		})
	}
}

func (p *pages) setErr(err error) { p.mu.Lock(); p.err = err; p.mu.Unlock() }

type fixture struct {
	clock  *isrtest.Clock
	table  isr.Table
	bodies *countingBodies
	pages  *pages
	coord  *isr.Coordinator
	h      *isr.Handler
}

// countingBodies counts the reads of a real body store.
type countingBodies struct {
	body.Store
	gets atomic.Int64
}

func (c *countingBodies) Get(ctx context.Context, key string) (*body.Object, error) {
	c.gets.Add(1)
	return c.Store.Get(ctx, key)
}

func newFixture(t *testing.T, opts ...isr.HandlerOption) *fixture {
	t.Helper()
	f := &fixture{
		clock:  isrtest.NewClock(isrtest.Base()),
		table:  newMemoryTable(t),
		bodies: &countingBodies{Store: body.NewMemory()},
		pages:  newPages(),
	}
	f.coord = mustCoordinator(t, f.table, isr.WithClock(f.clock.Now))
	f.h = f.handler(t, f.pages, opts...)
	return f
}

// handler returns another Handler on the fixture's table and body store: a
// second server process, as far as coordination goes.
func (f *fixture) handler(t *testing.T, p *pages, opts ...isr.HandlerOption) *isr.Handler {
	t.Helper()
	all := append([]isr.HandlerOption{isr.WithRevalidate(60 * time.Second), isr.WithStaleWhileRevalidate(time.Hour)}, opts...)
	h := mustHandler(t, f.coord, f.bodies, p.render, all...)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := h.Wait(ctx); err != nil {
			t.Errorf("background regenerations still running: %v", err)
		}
	})
	return h
}

func TestHandlerMissThenFresh(t *testing.T) {
	f := newFixture(t)
	r := get(f.h, "/a")
	if r.Code != 200 || r.Cache != isr.CacheMiss || r.Body != "v1 /a" {
		t.Fatalf("first request: %+v", r)
	}
	if ct := r.Hdr.Get("Content-Type"); ct != "text/html; charset=utf-8" {
		t.Fatalf("Content-Type %q", ct)
	}
	etag := body.ETag([]byte("v1 /a"))
	if r.Hdr.Get("ETag") != etag {
		t.Fatalf("ETag %q, want %q", r.Hdr.Get("ETag"), etag)
	}
	if cc := r.Hdr.Get("Cache-Control"); cc != "s-maxage=60, stale-while-revalidate=3600" {
		t.Fatalf("Cache-Control %q", cc)
	}
	f.clock.Advance(20 * time.Second)
	r = get(f.h, "/a")
	if r.Code != 200 || r.Cache != isr.CacheHit || r.Body != "v1 /a" || r.Hdr.Get("ETag") != etag {
		t.Fatalf("fresh request: %+v", r)
	}
	if cc := r.Hdr.Get("Cache-Control"); cc != "s-maxage=40, stale-while-revalidate=3600" {
		t.Fatalf("Cache-Control %q: s-maxage must be the freshness left", cc)
	}
	if n := f.pages.renders.Load(); n != 1 {
		t.Fatalf("%d renders, want 1", n)
	}
	// The rendered body is served from memory; the store is not read.
	if n := f.bodies.gets.Load(); n != 0 {
		t.Fatalf("%d body reads, want 0", n)
	}
	m, err := f.coord.Lookup(context.Background(), mustPK(t, "/a"))
	if err != nil || m.ETag != etag || m.RevalidateSeconds != 60 || m.GeneratedAt != isrtest.Base().Unix() {
		t.Fatalf("META %+v, %v", m, err)
	}
	// HEAD: same headers, no body.
	r = do(f.h, http.MethodHead, "/a")
	if r.Code != 200 || r.Body != "" || r.Hdr.Get("Content-Length") != strconv.Itoa(len("v1 /a")) || r.Hdr.Get("ETag") != etag {
		t.Fatalf("HEAD: %+v", r)
	}
}

func TestHandlerBodyReadFromStore(t *testing.T) {
	// A second handler (another process) has no cached body: it reads the
	// store once, then serves from its cache.
	f := newFixture(t)
	get(f.h, "/a")
	other := f.handler(t, newPages())
	for i := 0; i < 3; i++ {
		if r := get(other, "/a"); r.Code != 200 || r.Cache != isr.CacheHit || r.Body != "v1 /a" {
			t.Fatalf("other handler: %+v", r)
		}
	}
	if n := f.bodies.gets.Load(); n != 1 {
		t.Fatalf("%d body reads, want 1", n)
	}
	// Without a cache, every 200 reads the store.
	nocache := f.handler(t, newPages(), isr.WithBodyCache(0))
	get(nocache, "/a")
	get(nocache, "/a")
	if n := f.bodies.gets.Load(); n != 3 {
		t.Fatalf("%d body reads, want 3", n)
	}
}

func TestHandlerNotModified(t *testing.T) {
	f := newFixture(t, isr.WithBodyCache(0))
	first := get(f.h, "/p")
	etag := first.Hdr.Get("ETag")
	reads := f.bodies.gets.Load()
	for _, inm := range []string{etag, "W/" + etag, `"other", ` + etag, "*"} {
		r := get(f.h, "/p", "If-None-Match", inm)
		if r.Code != http.StatusNotModified || r.Body != "" || r.Hdr.Get("ETag") != etag || r.Hdr.Get("Cache-Control") == "" {
			t.Fatalf("If-None-Match %s: %+v", inm, r)
		}
	}
	if n := f.bodies.gets.Load(); n != reads {
		t.Fatalf("a 304 read the body store (%d reads)", n-reads)
	}
	r := get(f.h, "/p", "If-None-Match", `"something-else"`)
	if r.Code != 200 || r.Body != "v1 /p" {
		t.Fatalf("non-matching If-None-Match: %+v", r)
	}
	// Stale pages answer 304 too, and still trigger a regeneration.
	f.clock.Advance(61 * time.Second)
	r = get(f.h, "/p", "If-None-Match", etag)
	if r.Code != http.StatusNotModified || r.Cache != isr.CacheStale {
		t.Fatalf("stale If-None-Match: %+v", r)
	}
	if err := f.h.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	r = get(f.h, "/p", "If-None-Match", etag)
	if r.Code != 200 || r.Cache != isr.CacheHit || r.Body != "v2 /p" {
		t.Fatalf("after regeneration: %+v", r)
	}
}

// TestHandlerStaleOneRegeneration: 1,000 concurrent requests for a stale
// page are all answered with the stale page while the one regeneration is
// still held inside the render; then exactly one render has run.
func TestHandlerStaleOneRegeneration(t *testing.T) {
	f := newFixture(t)
	get(f.h, "/s")
	<-f.pages.started
	f.clock.Advance(61 * time.Second)
	release := f.pages.holdRenders()
	defer release()

	const n = 1000
	var wg sync.WaitGroup
	results := make([]isrtesting.Response, n)
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			results[i] = get(f.h, "/s")
		}(i)
	}
	close(start)
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("requests for a stale page waited for the regeneration")
	}
	// Every request has been answered, and the regeneration is still in
	// its render: nobody waited for it.
	select {
	case <-f.pages.started:
	case <-time.After(10 * time.Second):
		t.Fatal("no regeneration started")
	}
	for i, r := range results {
		if r.Code != 200 || r.Cache != isr.CacheStale || r.Body != "v1 /s" || r.Hdr.Get("Cache-Control") != "s-maxage=0, stale-while-revalidate=3600" {
			t.Fatalf("request %d: %+v", i, r)
		}
	}
	release()
	if err := f.h.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.pages.renders.Load(); got != 2 {
		t.Fatalf("%d renders, want 2 (first render + exactly one regeneration)", got)
	}
	r := get(f.h, "/s")
	if r.Code != 200 || r.Cache != isr.CacheHit || r.Body != "v2 /s" {
		t.Fatalf("after regeneration: %+v", r)
	}
}

// TestHandlerStaleTwoHandlers: two handlers (two processes as far as the
// table is concerned) serve one stale page; the lease allows one
// regeneration between them.
func TestHandlerStaleTwoHandlers(t *testing.T) {
	f := newFixture(t)
	get(f.h, "/s")
	<-f.pages.started
	f.clock.Advance(61 * time.Second)
	p2 := newPages()
	h2 := f.handler(t, p2)
	release := f.pages.holdRenders()
	release2 := p2.holdRenders()
	var wg sync.WaitGroup
	for i := 0; i < 200; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			h := http.Handler(f.h)
			if i%2 == 1 {
				h = h2
			}
			if r := get(h, "/s"); r.Code != 200 || r.Cache != isr.CacheStale {
				t.Errorf("request %d: %+v", i, r)
			}
		}(i)
	}
	wg.Wait()
	release()
	release2()
	for _, h := range []*isr.Handler{f.h, h2} {
		if err := h.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := f.pages.renders.Load() + p2.renders.Load(); got != 2 {
		t.Fatalf("%d renders across both handlers, want 2", got)
	}
}

// TestHandlerMissingRenderedOnce: concurrent first requests for a page wait
// for one render and all get it.
func TestHandlerMissingRenderedOnce(t *testing.T) {
	f := newFixture(t)
	release := f.pages.holdRenders()
	const n = 300
	var wg sync.WaitGroup
	var entered atomic.Int64
	results := make([]isrtesting.Response, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			entered.Add(1)
			results[i] = get(f.h, "/m")
		}(i)
	}
	<-f.pages.started
	for entered.Load() < n {
		time.Sleep(time.Millisecond)
	}
	release()
	wg.Wait()
	// A request that reached the flight before the render ended shares it
	// (MISS); one that the scheduler held back until after it reads the
	// page just published (HIT). Either way: one render, the same page.
	misses := 0
	for i, r := range results {
		if r.Code != 200 || (r.Cache != isr.CacheMiss && r.Cache != isr.CacheHit) || r.Body != "v1 /m" {
			t.Fatalf("request %d: %+v", i, r)
		}
		if r.Cache == isr.CacheMiss {
			misses++
		}
	}
	if misses == 0 {
		t.Fatal("no request shared the render")
	}
	if got := f.pages.renders.Load(); got != 1 {
		t.Fatalf("%d renders, want 1", got)
	}
}

// TestHandlerMissingWaitsForOtherProcess: while one handler renders a new
// page under the lease, another handler's requests for it poll META with
// bounded backoff and serve the published page; they never render it.
func TestHandlerMissingWaitsForOtherProcess(t *testing.T) {
	f := newFixture(t)
	release := f.pages.holdRenders()
	first := make(chan isrtesting.Response, 1)
	go func() { first <- get(f.h, "/w") }()
	<-f.pages.started // handler 1 holds the lease and is rendering

	p2 := newPages()
	var polls atomic.Int64
	h2 := f.handler(t, p2, isr.WithPollBackoff(time.Millisecond, 10*time.Millisecond),
		isr.WithRegenerateHook(func(string, isr.Result, error) { polls.Add(1) }))
	var wg sync.WaitGroup
	results := make([]isrtesting.Response, 50)
	for i := range results {
		wg.Add(1)
		go func(i int) { defer wg.Done(); results[i] = get(h2, "/w") }(i)
	}
	for polls.Load() < 3 {
		time.Sleep(time.Millisecond)
	}
	release()
	wg.Wait()
	if r := <-first; r.Code != 200 || r.Body != "v1 /w" {
		t.Fatalf("rendering handler: %+v", r)
	}
	// A request the scheduler held back until after the publish reads the
	// published page (HIT); the others waited for it (MISS). None renders.
	for i, r := range results {
		if r.Code != 200 || r.Body != "v1 /w" || (r.Cache != isr.CacheMiss && r.Cache != isr.CacheHit) {
			t.Fatalf("waiting request %d: %+v", i, r)
		}
	}
	if p2.renders.Load() != 0 || f.pages.renders.Load() != 1 {
		t.Fatalf("renders: %d + %d, want 1 + 0", f.pages.renders.Load(), p2.renders.Load())
	}
	// 50 waiting requests shared one flight: the polls are those of one
	// poller, bounded by the backoff.
	t.Logf("one flight polled %d times for 50 requests", polls.Load())
}

// TestHandlerMissingHolderDied: the lease on a missing page is held by a
// worker that never publishes; requests poll until the lease expires, then
// one of them takes it over and renders.
func TestHandlerMissingHolderDied(t *testing.T) {
	f := newFixture(t, isr.WithPollBackoff(time.Millisecond, 5*time.Millisecond))
	ctx := context.Background()
	pk := mustPK(t, "/dead")
	if _, err := f.coord.TryAcquire(ctx, pk, nil); err != nil {
		t.Fatal(err)
	}
	res := make(chan isrtesting.Response, 10)
	for i := 0; i < 10; i++ {
		go func() { res <- get(f.h, "/dead") }()
	}
	time.Sleep(30 * time.Millisecond)
	if f.pages.renders.Load() != 0 {
		t.Fatal("rendered while the lease was held")
	}
	f.clock.Advance(31 * time.Second) // the dead worker's lease expires
	for i := 0; i < 10; i++ {
		if r := <-res; r.Code != 200 || r.Body != "v1 /dead" {
			t.Fatalf("request %d: %+v", i, r)
		}
	}
	if got := f.pages.renders.Load(); got != 1 {
		t.Fatalf("%d renders, want 1", got)
	}
}

func TestHandlerWaitTimeout(t *testing.T) {
	f := newFixture(t, isr.WithWaitTimeout(50*time.Millisecond), isr.WithRenderTimeout(200*time.Millisecond))
	if _, err := f.coord.TryAcquire(context.Background(), mustPK(t, "/busy"), nil); err != nil {
		t.Fatal(err)
	}
	r := get(f.h, "/busy")
	if r.Code != http.StatusServiceUnavailable || r.Hdr.Get("Retry-After") == "" || r.Hdr.Get("Cache-Control") != "no-store" {
		t.Fatalf("%+v", r)
	}
	// The flight's own deadline passing first gives the same answer.
	h := f.handler(t, f.pages, isr.WithWaitTimeout(time.Hour), isr.WithRenderTimeout(50*time.Millisecond))
	r = get(h, "/busy")
	if r.Code != http.StatusServiceUnavailable || r.Hdr.Get("Retry-After") == "" {
		t.Fatalf("flight deadline: %+v", r)
	}
}

func TestHandlerRenderErrors(t *testing.T) {
	f := newFixture(t)
	f.pages.setErr(errors.New("boom"))
	if r := get(f.h, "/e"); r.Code != http.StatusInternalServerError || r.Hdr.Get("Cache-Control") != "no-store" {
		t.Fatalf("render error: %+v", r)
	}
	// Nothing was published and the lease was released: the next request
	// renders again at once.
	f.pages.setErr(nil)
	if r := get(f.h, "/e"); r.Code != 200 || r.Body != "v2 /e" {
		t.Fatalf("after a failed render: %+v", r)
	}
	f.pages.setErr(fmt.Errorf("lookup: %w", isr.ErrNoPage))
	if r := get(f.h, "/nothing"); r.Code != http.StatusNotFound {
		t.Fatalf("ErrNoPage: %+v", r)
	}
	// A stale page whose regeneration fails keeps being served.
	f.clock.Advance(61 * time.Second)
	f.pages.setErr(errors.New("boom"))
	for i := 0; i < 3; i++ {
		if r := get(f.h, "/e"); r.Code != 200 || r.Cache != isr.CacheStale || r.Body != "v2 /e" {
			t.Fatalf("stale after failed regeneration: %+v", r)
		}
		if err := f.h.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func TestHandlerInputs(t *testing.T) {
	f := newFixture(t)
	if r := do(f.h, http.MethodPost, "/a"); r.Code != http.StatusMethodNotAllowed || r.Hdr.Get("Allow") != "GET, HEAD" {
		t.Fatalf("POST: %+v", r)
	}
	bad := f.handler(t, f.pages, isr.WithKeyFunc(func(*http.Request) (string, string, error) {
		return "bad#tenant", "/x", nil
	}))
	if r := get(bad, "/x"); r.Code != http.StatusBadRequest {
		t.Fatalf("bad tenant: %+v", r)
	}
	tenant := f.handler(t, f.pages, isr.WithKeyFunc(func(r *http.Request) (string, string, error) {
		return r.Header.Get("X-Tenant"), r.URL.Path, nil
	}))
	if r := get(tenant, "/t", "X-Tenant", "t1"); r.Code != 200 {
		t.Fatalf("tenant: %+v", r)
	}
	pk, _ := isr.PK("t1", "/t")
	if _, err := f.table.GetMeta(context.Background(), pk); err != nil {
		t.Fatalf("tenant META: %v", err)
	}
	// Configuration mistakes: reported by NewHandler, all of them; a zero
	// Handler answers 500, no panic.
	for name, mk := range map[string]func() (*isr.Handler, error){
		"revalidate": func() (*isr.Handler, error) {
			return isr.NewHandler(f.coord, body.NewMemory(), f.pages.render, isr.WithRevalidate(0))
		},
		"poll": func() (*isr.Handler, error) {
			return isr.NewHandler(f.coord, body.NewMemory(), f.pages.render, isr.WithPollBackoff(time.Second, time.Millisecond))
		},
		"zero coordinator": func() (*isr.Handler, error) {
			return isr.NewHandler(&isr.Coordinator{}, body.NewMemory(), f.pages.render)
		},
	} {
		if h, err := mk(); h != nil || !errors.Is(err, idem.ErrInvalidOption) {
			t.Fatalf("%s: NewHandler = %v, %v", name, h, err)
		}
	}
	_, err := isr.NewHandler(nil, nil, nil, isr.WithRevalidate(0), nil)
	storetest.CheckOptionErrors(t, err, "isr.NewHandler", "isr.NewHandler", "isr.NewHandler", "isr.WithRevalidate", "isr.NewHandler")
	if r := get(&isr.Handler{}, "/a"); r.Code != http.StatusInternalServerError {
		t.Fatalf("zero handler: %+v", r)
	}
}

// TestHandlerRequestCounts: a fresh hit is one table request (the META
// read) and no body read; a background regeneration is the serving request's
// META read plus the Coordinator's META re-read, acquire and publish.
func TestHandlerRequestCounts(t *testing.T) {
	f := newFixture(t)
	mt := f.table.(*isr.MemoryTable)
	get(f.h, "/c")
	before, reads := mt.Requests(), f.bodies.gets.Load()
	for i := 0; i < 10; i++ {
		if r := get(f.h, "/c"); r.Cache != isr.CacheHit {
			t.Fatalf("%+v", r)
		}
	}
	if n := mt.Requests() - before; n != 10 {
		t.Fatalf("10 fresh hits cost %d table requests, want 10", n)
	}
	if n := f.bodies.gets.Load() - reads; n != 0 {
		t.Fatalf("10 fresh hits read the body store %d times, want 0", n)
	}
	f.clock.Advance(61 * time.Second)
	before = mt.Requests()
	get(f.h, "/c")
	if err := f.h.Wait(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := mt.Requests() - before; n != 3 {
		t.Fatalf("stale request + regeneration cost %d table requests, want 3 (read, acquire, publish)", n)
	}
}

// TestHandlerLeaseElsewhereCooldown: while another worker holds the lease
// on a stale page, one handler asks the table about it at most once per
// poll-backoff maximum, however many requests it serves.
func TestHandlerLeaseElsewhereCooldown(t *testing.T) {
	var attempts atomic.Int64
	f := newFixture(t, isr.WithPollBackoff(time.Millisecond, time.Hour),
		isr.WithRegenerateHook(func(string, isr.Result, error) { attempts.Add(1) }))
	get(f.h, "/busy")
	attempts.Store(0)
	f.clock.Advance(61 * time.Second)
	seen, err := f.coord.Lookup(context.Background(), mustPK(t, "/busy"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.coord.TryAcquire(context.Background(), mustPK(t, "/busy"), &seen); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i++ {
		if r := get(f.h, "/busy"); r.Code != 200 || r.Cache != isr.CacheStale {
			t.Fatalf("%+v", r)
		}
		if err := f.h.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if n := attempts.Load(); n != 1 {
		t.Fatalf("%d regeneration attempts for 50 stale requests while the lease was held elsewhere, want 1", n)
	}
	if f.pages.renders.Load() != 1 {
		t.Fatalf("rendered while the lease was held elsewhere")
	}
}

// --- real backends ------------------------------------------------------

// BenchmarkHandlerFreshHit measures fresh hits (META read, body from the
// in-memory cache) on the memory table, in parallel.
func BenchmarkHandlerFreshHit(b *testing.B) {
	coord := mustCoordinator(b, newMemoryTable(b))
	p := newPages()
	h := mustHandler(b, coord, body.NewMemory(), p.render, isr.WithRevalidate(time.Hour))
	isrtesting.BenchFresh(b, h)
}

// BenchmarkHandlerFreshHit304 measures fresh revalidations answered 304.
func BenchmarkHandlerFreshHit304(b *testing.B) {
	coord := mustCoordinator(b, newMemoryTable(b))
	p := newPages()
	h := mustHandler(b, coord, body.NewMemory(), p.render, isr.WithRevalidate(time.Hour))
	r := get(h, "/bench")
	etag := r.Hdr.Get("ETag")
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := httptest.NewRequest(http.MethodGet, "/bench", nil)
		req.Header.Set("If-None-Match", etag)
		for pb.Next() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != http.StatusNotModified {
				b.Fatalf("status %d", w.Code)
			}
		}
	})
}

func TestDefaultKeyIgnoresQuery(t *testing.T) {
	f := newFixture(t)
	get(f.h, "/q?a=1")
	if r := get(f.h, "/q?b=2"); r.Cache != isr.CacheHit || r.Body != "v1 /q" {
		t.Fatalf("%+v", r)
	}
	if f.pages.renders.Load() != 1 {
		t.Fatal("a query string caused a second render")
	}
}

func ExampleHandler() {
	table, err := isr.NewMemoryTable()
	if err != nil {
		panic(err)
	}
	defer table.Close()
	coord, err := isr.NewCoordinator(table)
	if err != nil {
		panic(err)
	}
	render := func(ctx context.Context, tenant, cacheKey string) ([]byte, string, error) {
		return []byte("<h1>" + cacheKey + "</h1>"), "text/html; charset=utf-8", nil
	}
	h, err := isr.NewHandler(coord, body.NewMemory(), render, isr.WithRevalidate(time.Minute))
	if err != nil {
		panic(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	for i := 0; i < 2; i++ {
		res, err := http.Get(srv.URL + "/hello")
		if err != nil {
			fmt.Println(err)
			return
		}
		b, _ := io.ReadAll(res.Body)
		_ = res.Body.Close()
		fmt.Println(res.StatusCode, res.Header.Get(isr.HeaderCache), string(b))
	}
	// Output:
	// 200 MISS <h1>/hello</h1>
	// 200 HIT <h1>/hello</h1>
}

// Wait may be called while requests keep starting regenerations (a
// shutdown that waits before the server has drained, a health check): it
// waits for the regenerations started so far and never panics.
func TestHandlerWaitWhileServing(t *testing.T) {
	f := newFixture(t)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	go func() { // the fixture's render reports every start
		for {
			select {
			case <-f.pages.started:
			case <-stop:
				return
			}
		}
	}()
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if r := get(f.h, fmt.Sprintf("/w/%d/%d", g, i)); r.Code != 200 {
					t.Errorf("request: %+v", r)
					return
				}
			}
		}(g)
	}
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		if err := f.h.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}

// seedForeignPage publishes a page with the given ETag and generation time
// straight through the Coordinator, as another service sharing the table
// might.
func seedForeignPage(t *testing.T, f *fixture, path, etag string, generatedAt time.Time) {
	t.Helper()
	ctx := context.Background()
	pk, err := isr.PK("", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.bodies.Put(ctx, "seeded"+path, []byte("seeded"), "text/plain"); err != nil {
		t.Fatal(err)
	}
	l, err := f.coord.TryAcquire(ctx, pk, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.coord.Publish(ctx, l, isr.Page{S3Key: "seeded" + path, ETag: etag, RevalidateSeconds: 60, GeneratedAt: generatedAt}); err != nil {
		t.Fatal(err)
	}
}

// If-None-Match is a list that may be split over several header fields,
// and an entity tag may contain a comma.
func TestHandlerNotModifiedLists(t *testing.T) {
	f := newFixture(t)
	seedForeignPage(t, f, "/c", `"a,b"`, f.clock.Now())
	for _, fields := range [][]string{
		{`"a,b"`},
		{`"x", W/"a,b"`},
		{`"x"`, `"a,b"`},
		{`"x"`, `*`},
	} {
		req := httptest.NewRequest(http.MethodGet, "/c", nil)
		for _, v := range fields {
			req.Header.Add("If-None-Match", v)
		}
		w := httptest.NewRecorder()
		f.h.ServeHTTP(w, req)
		if w.Code != http.StatusNotModified {
			t.Errorf("If-None-Match %q: %d, want 304", fields, w.Code)
		}
	}
	for _, inm := range []string{`"a"`, `b"`, `"a,b`, `"a"` + ", " + `b"`, `W/`, `"x", W/`, `W/"`, `"`} {
		if r := get(f.h, "/c", "If-None-Match", inm); r.Code != http.StatusOK {
			t.Errorf("If-None-Match %s: %d, want 200", inm, r.Code)
		}
	}
}

// s-maxage never exceeds revalidate_seconds, even for a META generated
// "in the future" by a writer whose clock is ahead.
func TestHandlerSMaxAgeBoundedByRevalidate(t *testing.T) {
	f := newFixture(t)
	seedForeignPage(t, f, "/f", `"f"`, f.clock.Now().Add(time.Hour))
	r := get(f.h, "/f")
	if cc := r.Hdr.Get("Cache-Control"); r.Code != 200 || cc != "s-maxage=60, stale-while-revalidate=3600" {
		t.Fatalf("%d, Cache-Control %q", r.Code, cc)
	}
}
