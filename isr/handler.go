package isr

import (
	"container/list"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idem-go/idem/isr/body"
	"github.com/idem-go/idem/lease"
	"github.com/idem-go/idem/storekit"
)

// PageFunc renders the page for a cache key. It returns the body and its
// media type. It runs in the background for stale pages, after the request
// that noticed the staleness may have finished, so it receives the cache key
// (and tenant) rather than the *http.Request. ctx is cancelled if the lease
// is lost or the render timeout (WithRenderTimeout) passes.
type PageFunc func(ctx context.Context, tenant, cacheKey string) (content []byte, contentType string, err error)

// ErrNoPage is returned (possibly wrapped) by a PageFunc when the cache key
// names no page; the Handler answers 404 and caches nothing.
var ErrNoPage = errors.New("isr: no such page")

// KeyFunc maps a request to the tenant ("" for single-tenant tables) and the
// cache key of the page it asks for. An error answers 400 Bad Request.
type KeyFunc func(r *http.Request) (tenant, cacheKey string, err error)

// DefaultKey is the default KeyFunc: no tenant, and the request's escaped
// path as the cache key. The query string is ignored, so arbitrary query
// strings cannot make the Handler render and store one page per variant;
// a site whose pages vary by query supplies a KeyFunc that keeps the
// parameters that matter (normalised).
func DefaultKey(r *http.Request) (string, string, error) {
	if r.URL == nil {
		return "", "", invalid("request", "no URL")
	}
	k := r.URL.EscapedPath()
	if k == "" {
		k = "/"
	}
	return "", k, nil
}

// HandlerOption configures a Handler. NewHandler reports every invalid
// option as an *storekit.OptionError matching idem.ErrInvalidOption.
type HandlerOption func(*handlerConfig)

type handlerConfig struct {
	storekit.Options
	key            KeyFunc
	revalidate     time.Duration
	swr            time.Duration
	waitTimeout    time.Duration
	renderTimeout  time.Duration
	pollMin        time.Duration
	pollMax        time.Duration
	bodyPrefix     string
	bodyCacheBytes int64
	logger         *slog.Logger
	onRegenerate   func(pk string, res Result, err error)
}

// WithKeyFunc sets how a request maps to a tenant and cache key (default
// DefaultKey).
func WithKeyFunc(f KeyFunc) HandlerOption {
	return func(c *handlerConfig) {
		if f == nil {
			c.Invalid("WithKeyFunc", "KeyFunc is nil")
			return
		}
		c.key = f
	}
}

// WithRevalidate sets the freshness window of pages the Handler renders
// (revalidate_seconds; default 60s; whole seconds, at least 1s). A page
// another writer published without revalidate_seconds (a pointer-only
// META) is fresh for the Coordinator's WithDefaultRevalidate instead.
func WithRevalidate(d time.Duration) HandlerOption {
	return func(c *handlerConfig) {
		if d < time.Second {
			c.Invalid("WithRevalidate", "must be at least 1s")
			return
		}
		c.revalidate = d
	}
}

// WithStaleWhileRevalidate sets the stale-while-revalidate value of the
// Cache-Control header (default 24h; 0 omits the directive).
func WithStaleWhileRevalidate(d time.Duration) HandlerOption {
	return func(c *handlerConfig) {
		if d < 0 {
			c.Invalid("WithStaleWhileRevalidate", "must not be negative, got %v", d)
			return
		}
		c.swr = d
	}
}

// WithWaitTimeout bounds how long a request for a page that has never been
// rendered waits for it (default 30s); past it the answer is 503 with
// Retry-After.
func WithWaitTimeout(d time.Duration) HandlerOption {
	return func(c *handlerConfig) {
		if d <= 0 {
			c.Invalid("WithWaitTimeout", "must be positive")
			return
		}
		c.waitTimeout = d
	}
}

// WithRenderTimeout bounds one regeneration: render, body upload and
// publish (default 2m).
func WithRenderTimeout(d time.Duration) HandlerOption {
	return func(c *handlerConfig) {
		if d <= 0 {
			c.Invalid("WithRenderTimeout", "must be positive")
			return
		}
		c.renderTimeout = d
	}
}

// WithPollBackoff sets the bounded exponential backoff with which requests
// for a missing page poll META while another process holds the lease
// (default 10ms doubling up to 500ms, with jitter).
func WithPollBackoff(min, max time.Duration) HandlerOption {
	return func(c *handlerConfig) {
		if min <= 0 || max < min {
			c.Invalid("WithPollBackoff", "need 0 < min <= max")
			return
		}
		c.pollMin, c.pollMax = min, max
	}
}

// WithBodyPrefix sets the prefix of the body store keys the Handler writes
// (default "isr/"). A body key is prefix + sha256(pk) + "/" + sha256(body),
// so a key always names the same bytes.
func WithBodyPrefix(prefix string) HandlerOption {
	return func(c *handlerConfig) {
		if len(prefix) > 256 {
			c.Invalid("WithBodyPrefix", "longer than 256 bytes")
			return
		}
		c.bodyPrefix = prefix
	}
}

// WithBodyCache sets how many bytes of bodies the Handler keeps in memory
// (default 32 MiB; 0 disables the cache). Entries are keyed by s3_key and
// ETag and used only when the body's ETag matches META's, so a body
// replaced in place under the same key by another writer is fetched again.
func WithBodyCache(maxBytes int64) HandlerOption {
	return func(c *handlerConfig) {
		if maxBytes < 0 {
			c.Invalid("WithBodyCache", "must not be negative, got %d", maxBytes)
			return
		}
		c.bodyCacheBytes = maxBytes
	}
}

// WithLogger sets where background regeneration errors are logged (default
// slog.Default()).
func WithLogger(l *slog.Logger) HandlerOption {
	return func(c *handlerConfig) {
		if l == nil {
			c.Invalid("WithLogger", "logger is nil")
			return
		}
		c.logger = l
	}
}

// WithRegenerateHook sets a function called after every regeneration
// attempt the Handler makes (foreground or background) with the
// Coordinator's result, for metrics.
func WithRegenerateHook(f func(pk string, res Result, err error)) HandlerOption {
	return func(c *handlerConfig) { c.onRegenerate = f }
}

// Handler is an http.Handler serving ISR pages:
//
//   - a fresh page (generated_at + revalidate_seconds > now) is served from
//     the body store with its ETag and "Cache-Control: s-maxage=<seconds of
//     freshness left>, stale-while-revalidate=<window>"; If-None-Match with
//     a matching ETag answers 304 without reading the body;
//   - a stale page is served at once ("s-maxage=0") and regenerated in the
//     background: one regeneration per page in this process (in-process
//     coalescing) and across processes (the lease, acquired only if META has
//     not been published since it was read);
//   - a page never rendered is rendered once: concurrent requests in this
//     process wait for the same render, and requests in other processes
//     poll META with bounded backoff while the lease is held elsewhere (and
//     take the lease over if its holder dies), up to the wait timeout.
//
// The X-Isr-Cache response header says which case applied: HIT, STALE or
// MISS. Only GET and HEAD are served (405 otherwise). Rendered bodies are
// written to the body store under content-addressed keys, so a published
// body is never overwritten and needs no cross-store atomicity; bodies
// replaced by a newer generation are left in the store for its own
// lifecycle rules to collect.
//
// A Handler is safe for concurrent use. Wait waits for background
// regenerations, for a graceful shutdown.
type Handler struct {
	coord  *Coordinator
	bodies body.Store
	render PageFunc
	cfg    handlerConfig

	mu      sync.Mutex
	flights map[string]*flight
	// busy holds, per pk, when this process may next try to regenerate a
	// stale page whose lease it last found held elsewhere.
	busy map[string]time.Time

	cache *bodyCache
}

// flight is one regeneration of one page in this process, shared by every
// request that needs it.
type flight struct {
	done chan struct{}
	flightResult
}

type flightResult struct {
	meta Meta
	has  bool
	obj  *body.Object // the rendered body, when this flight rendered it
	err  error
	// elsewhere: another worker holds the lease.
	elsewhere bool
}

// NewHandler returns a Handler that coordinates through coord, keeps bodies
// in bodies and renders pages with render. It does no I/O. A nil argument
// and every invalid option are reported, joined, each an *storekit.OptionError
// matching idem.ErrInvalidOption.
func NewHandler(coord *Coordinator, bodies body.Store, render PageFunc, opts ...HandlerOption) (*Handler, error) {
	cfg := handlerConfig{
		Options:        storekit.Options{Store: "isr"},
		key:            DefaultKey,
		revalidate:     60 * time.Second,
		swr:            24 * time.Hour,
		waitTimeout:    30 * time.Second,
		renderTimeout:  2 * time.Minute,
		pollMin:        10 * time.Millisecond,
		pollMax:        500 * time.Millisecond,
		bodyPrefix:     "isr/",
		bodyCacheBytes: 32 << 20,
		logger:         slog.Default(),
	}
	if err := coord.check(); err != nil {
		cfg.Invalid("NewHandler", "coordinator is nil or not made by NewCoordinator")
	}
	if bodies == nil {
		cfg.Invalid("NewHandler", "body store is nil")
	}
	if render == nil {
		cfg.Invalid("NewHandler", "render function is nil")
	}
	for _, o := range opts {
		if o == nil {
			cfg.Invalid("NewHandler", "nil option")
			continue
		}
		o(&cfg)
	}
	if err := cfg.Err(); err != nil {
		return nil, err
	}
	h := &Handler{
		coord:   coord,
		bodies:  bodies,
		render:  render,
		cfg:     cfg,
		flights: map[string]*flight{},
		busy:    map[string]time.Time{},
	}
	if cfg.bodyCacheBytes > 0 {
		h.cache = newBodyCache(cfg.bodyCacheBytes)
	}
	return h, nil
}

// check refuses a Handler that NewHandler did not make.
func (h *Handler) check() error {
	if h == nil || h.flights == nil {
		return unmade("Handler", "NewHandler")
	}
	return nil
}

// Wait blocks until every background regeneration started so far has
// finished, or ctx is done. It may be called while requests are still being
// served; regenerations they start after the call are not waited for.
func (h *Handler) Wait(ctx context.Context) error {
	if err := h.check(); err != nil {
		return err
	}
	h.mu.Lock()
	pending := make([]*flight, 0, len(h.flights))
	for _, f := range h.flights {
		pending = append(pending, f)
	}
	h.mu.Unlock()
	for _, f := range pending {
		select {
		case <-f.done:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	return nil
}

// Cache states reported in the X-Isr-Cache header.
const (
	CacheHit   = "HIT"
	CacheStale = "STALE"
	CacheMiss  = "MISS"
)

// HeaderCache is the response header that reports the cache state.
const HeaderCache = "X-Isr-Cache"

// ServeHTTP implements http.Handler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if err := h.check(); err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	tenant, cacheKey, err := h.cfg.key(r)
	if err != nil {
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	pk, err := PK(tenant, cacheKey)
	if err != nil {
		http.Error(w, "bad request: "+err.Error(), http.StatusBadRequest)
		return
	}
	ctx := r.Context()
	meta, err := h.coord.Lookup(ctx, pk)
	switch {
	case err == nil:
		if meta.Fresh(h.coord.Now()) {
			h.serve(w, r, meta, nil, CacheHit)
			return
		}
		// Stale: serve what we have now; regenerate in the background.
		h.startFlight(pk, tenant, cacheKey, meta, true)
		h.serve(w, r, meta, nil, CacheStale)
		return
	case errors.Is(err, ErrNotFound):
	default:
		h.fail(w, http.StatusBadGateway, "cache metadata unavailable", err)
		return
	}

	// Missing: render once, everyone waits for the same flight.
	f := h.startFlight(pk, tenant, cacheKey, Meta{}, false)
	wctx, cancel := context.WithTimeout(ctx, h.cfg.waitTimeout)
	defer cancel()
	select {
	case <-f.done:
	case <-wctx.Done():
		if ctx.Err() != nil {
			return // the client went away
		}
		w.Header().Set("Retry-After", "1")
		h.fail(w, http.StatusServiceUnavailable, "page is being generated", wctx.Err())
		return
	}
	switch {
	case f.has:
		// A page to serve (even if a regeneration joined here failed).
		state := CacheMiss
		if !f.meta.Fresh(h.coord.Now()) {
			state = CacheStale
		}
		h.serve(w, r, f.meta, f.obj, state)
	case errors.Is(f.err, ErrNoPage):
		w.Header().Set("Cache-Control", "no-store")
		http.NotFound(w, r)
	case errors.Is(f.err, context.DeadlineExceeded):
		// The flight ran out of time waiting for another worker's render.
		w.Header().Set("Retry-After", "1")
		h.fail(w, http.StatusServiceUnavailable, "page is being generated", f.err)
	case f.err != nil:
		h.fail(w, http.StatusInternalServerError, "page generation failed", f.err)
	default:
		w.Header().Set("Retry-After", "1")
		h.fail(w, http.StatusServiceUnavailable, "page is being generated", errors.New("no META yet"))
	}
}

// startFlight returns the flight regenerating pk in this process, starting
// one if there is none. For a stale page (hasSeen) it returns nil, starting
// nothing, when this process found the lease held elsewhere less than the
// poll backoff's maximum ago: the holder is regenerating the page, and
// asking the table again on every request would only add load. Flights are
// tracked by Wait.
func (h *Handler) startFlight(pk, tenant, cacheKey string, seen Meta, hasSeen bool) *flight {
	h.mu.Lock()
	if f, ok := h.flights[pk]; ok {
		h.mu.Unlock()
		return f
	}
	if hasSeen {
		if until, ok := h.busy[pk]; ok {
			if time.Now().Before(until) {
				h.mu.Unlock()
				return nil
			}
			delete(h.busy, pk)
		}
	}
	f := &flight{done: make(chan struct{})}
	h.flights[pk] = f
	h.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), h.cfg.renderTimeout)
		defer cancel()
		f.flightResult = h.regenerate(ctx, pk, tenant, cacheKey, seen, hasSeen)
		if f.err != nil && hasSeen && !errors.Is(f.err, ErrNoPage) { // foreground failures are logged when answered
			h.cfg.logger.Error("isr: regeneration failed", "pk", pk, "err", f.err)
		}
		h.mu.Lock()
		delete(h.flights, pk)
		if f.elsewhere && hasSeen {
			now := time.Now()
			if len(h.busy) >= 4096 {
				for k, until := range h.busy {
					if now.After(until) {
						delete(h.busy, k)
					}
				}
			}
			h.busy[pk] = now.Add(h.cfg.pollMax)
		}
		h.mu.Unlock()
		close(f.done)
	}()
	return f
}

// regenerate runs the Coordinator's flow for pk. When another worker holds
// the lease and there is no META to serve, it polls with bounded backoff
// (running the flow again each time, so a lease whose holder died is taken
// over once it expires) until META appears or ctx ends.
func (h *Handler) regenerate(ctx context.Context, pk, tenant, cacheKey string, seen Meta, hasSeen bool) flightResult {
	var rendered *body.Object
	renderFn := func(ctx context.Context, lease Lease) (Page, error) {
		content, ct, err := h.render(ctx, tenant, cacheKey)
		if err != nil {
			return Page{}, err
		}
		key := h.bodyKey(pk, content)
		etag, err := h.bodies.Put(ctx, key, content, ct)
		if err != nil {
			return Page{}, err
		}
		rendered = &body.Object{Content: content, ContentType: ct, ETag: etag}
		return Page{S3Key: key, ETag: etag, RevalidateSeconds: seconds(h.cfg.revalidate)}, nil
	}
	backoff := h.cfg.pollMin
	for try := 0; ; try++ {
		rendered = nil
		var res Result
		var err error
		switch {
		case try > 0: // polling: look at META again
			res, err = h.coord.Regenerate(ctx, pk, nil, renderFn)
		case hasSeen: // the META this request was served from
			res, err = h.coord.RegenerateFrom(ctx, pk, &seen, nil, renderFn)
		default:
			res, err = h.coord.RegenerateFrom(ctx, pk, nil, nil, renderFn)
		}
		if h.cfg.onRegenerate != nil {
			h.cfg.onRegenerate(pk, res, err)
		}
		if err != nil {
			return flightResult{meta: seen, has: hasSeen, err: err}
		}
		switch res.Outcome {
		case OutcomeRegenerated:
			if h.cache != nil && rendered != nil {
				h.cache.put(res.Meta.S3Key, rendered)
			}
			return flightResult{meta: res.Meta, has: true, obj: rendered}
		case OutcomeFresh, OutcomeRecorded:
			if res.HasMeta {
				return flightResult{meta: res.Meta, has: true}
			}
		case OutcomeInProgress:
			// Someone else is regenerating. If there is a page to serve,
			// serve it: never wait on the holder.
			if res.HasMeta {
				return flightResult{meta: res.Meta, has: true, elsewhere: true}
			}
			if hasSeen {
				return flightResult{meta: seen, has: true, elsewhere: true}
			}
		}
		// No page yet and the lease is held elsewhere: poll.
		if err := lease.Sleep(ctx, lease.Jitter(backoff)); err != nil {
			return flightResult{err: err}
		}
		backoff = min(2*backoff, h.cfg.pollMax)
	}
}

// bodyKey is the content-addressed body store key of a rendering of pk.
func (h *Handler) bodyKey(pk string, content []byte) string {
	p := sha256.Sum256([]byte(pk))
	c := sha256.Sum256(content)
	return h.cfg.bodyPrefix + hex.EncodeToString(p[:]) + "/" + hex.EncodeToString(c[:])
}

// serve writes meta's page. obj, when non-nil, is its body. The body is
// read only when it is sent (or when META carries no ETag).
func (h *Handler) serve(w http.ResponseWriter, r *http.Request, meta Meta, obj *body.Object, state string) {
	etag := meta.ETag
	if etag == "" && obj == nil {
		var err error
		if obj, err = h.fetch(r.Context(), meta); err != nil {
			h.bodyFailed(w, r, err)
			return
		}
	}
	if etag == "" {
		etag = obj.ETag
	}
	hdr := w.Header()
	if etagMatch(r.Header.Values("If-None-Match"), etag) {
		hdr.Set("ETag", etag)
		hdr.Set("Cache-Control", h.cacheControl(meta, state))
		hdr.Set(HeaderCache, state)
		w.WriteHeader(http.StatusNotModified)
		return
	}
	if obj == nil {
		var err error
		if obj, err = h.fetch(r.Context(), meta); err != nil {
			h.bodyFailed(w, r, err)
			return
		}
	}
	hdr.Set("ETag", etag)
	hdr.Set("Cache-Control", h.cacheControl(meta, state))
	hdr.Set(HeaderCache, state)
	if obj.ContentType != "" {
		hdr.Set("Content-Type", obj.ContentType)
	} else {
		hdr.Set("Content-Type", "application/octet-stream")
	}
	hdr.Set("Content-Length", strconv.Itoa(len(obj.Content)))
	w.WriteHeader(http.StatusOK)
	if r.Method != http.MethodHead {
		_, _ = w.Write(obj.Content)
	}
}

func (h *Handler) bodyFailed(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // the client went away
	}
	h.fail(w, http.StatusBadGateway, "page body unavailable", err)
}

// fetch returns meta's body, from the in-memory cache when its ETag matches.
func (h *Handler) fetch(ctx context.Context, meta Meta) (*body.Object, error) {
	if h.cache != nil {
		if o := h.cache.get(meta.S3Key, meta.ETag); o != nil {
			return o, nil
		}
	}
	o, err := h.bodies.Get(ctx, meta.S3Key)
	if err != nil {
		return nil, err
	}
	if h.cache != nil && (meta.ETag == "" || meta.ETag == o.ETag) {
		h.cache.put(meta.S3Key, o)
	}
	return o, nil
}

func (h *Handler) cacheControl(meta Meta, state string) string {
	maxAge := int64(0)
	if state != CacheStale {
		// Never more than the freshness window, even when generated_at is
		// ahead of this clock (a writer's skew, or a corrupt item).
		maxAge = min(max(meta.GeneratedAt+meta.RevalidateSeconds-h.coord.Now().Unix(), 0), max(meta.RevalidateSeconds, 0))
	}
	b := make([]byte, 0, 64)
	b = append(b, "s-maxage="...)
	b = strconv.AppendInt(b, maxAge, 10)
	if h.cfg.swr > 0 {
		b = append(b, ", stale-while-revalidate="...)
		b = strconv.AppendInt(b, seconds(h.cfg.swr), 10)
	}
	return string(b)
}

func (h *Handler) fail(w http.ResponseWriter, code int, msg string, err error) {
	if code >= 500 && code != http.StatusServiceUnavailable {
		h.cfg.logger.Error("isr: "+msg, "err", err)
	}
	w.Header().Set("Cache-Control", "no-store")
	http.Error(w, msg, code)
}

// etagMatch reports whether the If-None-Match header fields (a list, maybe
// split over several fields) match etag, with the weak comparison RFC 9110
// prescribes for If-None-Match. An entity tag is a quoted string that may
// itself contain commas.
func etagMatch(fields []string, etag string) bool {
	if etag == "" {
		return false
	}
	want := strings.TrimPrefix(etag, "W/")
	for _, v := range fields {
		for {
			v = strings.TrimLeft(v, " \t,")
			if v == "" {
				break
			}
			if v[0] == '*' {
				return true
			}
			v = strings.TrimPrefix(v, "W/")
			var tag string
			if end := strings.IndexByte(v[min(1, len(v)):], '"'); v != "" && v[0] == '"' && end >= 0 {
				tag, v = v[:end+2], v[end+2:]
			} else if i := strings.IndexByte(v, ','); i >= 0 { // not a quoted tag
				tag, v = strings.TrimSpace(v[:i]), v[i:]
			} else {
				tag, v = strings.TrimSpace(v), ""
			}
			if tag == want {
				return true
			}
		}
	}
	return false
}

// bodyCache is a byte-bounded LRU of bodies keyed by body store key.
type bodyCache struct {
	mu    sync.Mutex
	max   int64
	size  int64
	ll    *list.List
	items map[string]*list.Element
}

type cacheEntry struct {
	key string
	obj *body.Object
}

func newBodyCache(max int64) *bodyCache {
	return &bodyCache{max: max, ll: list.New(), items: map[string]*list.Element{}}
}

// get returns the cached body for key whose ETag is etag ("" accepts any).
func (c *bodyCache) get(key, etag string) *body.Object {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[key]
	if !ok {
		return nil
	}
	ent := e.Value.(*cacheEntry)
	if etag != "" && ent.obj.ETag != etag {
		return nil
	}
	c.ll.MoveToFront(e)
	return ent.obj
}

func (c *bodyCache) put(key string, o *body.Object) {
	n := int64(len(o.Content))
	if n > c.max {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		c.size -= int64(len(e.Value.(*cacheEntry).obj.Content))
		c.ll.Remove(e)
	}
	c.items[key] = c.ll.PushFront(&cacheEntry{key: key, obj: o})
	c.size += n
	for c.size > c.max {
		e := c.ll.Back()
		ent := e.Value.(*cacheEntry)
		c.ll.Remove(e)
		delete(c.items, ent.key)
		c.size -= int64(len(ent.obj.Content))
	}
}
