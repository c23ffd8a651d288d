package isr

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idem-go/idem/lease"
	"github.com/idem-go/idem/storekit"
)

// Option configures a Coordinator. NewCoordinator reports every invalid
// option as an *storekit.OptionError matching idem.ErrInvalidOption.
type Option func(*config)

type config struct {
	storekit.Options // Now
	leaseDuration    time.Duration
	ttlBuffer        time.Duration
	metaTTL          time.Duration
	requestTTL       time.Duration
	pointerSwap      bool
	monotonic        bool
	retryFailed      bool
	acquireTries     int
	revalidate       time.Duration
}

// WithClock sets the clock that decides freshness and lease expiry (default
// time.Now). All workers of one cache key should have clocks within a small
// fraction of the lease duration of each other.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		c.SetClock(now)
	}
}

// WithLeaseDuration sets how long an acquired lease is held (default 30s;
// whole seconds, at least 1s). Regenerate refreshes a lease whose render runs
// longer than a third of it.
func WithLeaseDuration(d time.Duration) Option {
	return atLeastSecond("WithLeaseDuration", d, func(c *config) { c.leaseDuration = d })
}

// WithTTLBuffer sets how long an item that no longer decides anything is
// kept before its ttl lets the store remove it (default 1h; at least 1s):
// the LOCK ttl is lease_expires_at + d, and a VER# row superseded by a
// recipe-B publish gets ttl publish time + d (readers that read META just
// before the swap still find the row it pointed to). TTL is garbage
// collection only.
func WithTTLBuffer(d time.Duration) Option {
	return atLeastSecond("WithTTLBuffer", d, func(c *config) { c.ttlBuffer = d })
}

// atLeastSecond is an option that sets a duration of at least one second.
func atLeastSecond(name string, d time.Duration, set func(*config)) Option {
	return func(c *config) {
		if d < time.Second {
			c.Invalid(name, "must be at least 1s, got %v", d)
			return
		}
		set(c)
	}
}

// WithMetaTTL sets the META (and VER#) ttl to generated_at + d (default 0:
// no ttl attribute). It is garbage collection only; freshness is decided by
// generated_at + revalidate_seconds.
func WithMetaTTL(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.Invalid("WithMetaTTL", "must not be negative, got %v", d)
			return
		}
		c.metaTTL = d
	}
}

// WithRequestTTL sets the ttl of REQ# items to creation + d (default 24h; at
// least 1s). A REQ# item whose ttl has passed counts as absent, so a request
// left STARTED by a crashed worker is retried after d at the latest.
func WithRequestTTL(d time.Duration) Option {
	return atLeastSecond("WithRequestTTL", d, func(c *config) { c.requestTTL = d })
}

// WithDefaultRevalidate sets the freshness window of a page whose META
// carries no revalidate_seconds, nor the VER# row it points to (default
// 60s, the Handler's default WithRevalidate; whole seconds, at least 1s): a
// recipe-B writer that sets only current_sk and version. Lookup and
// Regenerate fill it in (Meta.RevalidateMissing tells); a recipe-A META
// without revalidate_seconds stays corrupt.
func WithDefaultRevalidate(d time.Duration) Option {
	return atLeastSecond("WithDefaultRevalidate", d, func(c *config) { c.revalidate = d })
}

// WithPointerSwap makes Publish and Regenerate use recipe B (VER#<id> item
// plus META pointer with optimistic version) instead of recipe A (in-place
// META put).
func WithPointerSwap() Option { return func(c *config) { c.pointerSwap = true } }

// WithMonotonicGeneratedAt adds the optional guard that a publish must carry
// a generated_at strictly newer than META's. With second resolution, two
// publishes within the same second conflict (ErrNotNewer).
func WithMonotonicGeneratedAt() Option { return func(c *config) { c.monotonic = true } }

// WithRetryFailedRequests sets whether a request whose REQ# item is FAILED
// (with the same request_hash) is run again (default true) or refused with
// ErrRequestFailed.
func WithRetryFailedRequests(retry bool) Option {
	return func(c *config) { c.retryFailed = retry }
}

// Coordinator runs the ISR protocol on a Table: freshness check, request
// idempotency, lease, publish. It is safe for concurrent use.
type Coordinator struct {
	table Table
	cfg   config
}

// NewCoordinator returns a Coordinator over table. It does no I/O. A nil
// table and every invalid option are reported, joined, each an
// *storekit.OptionError matching idem.ErrInvalidOption.
func NewCoordinator(table Table, opts ...Option) (*Coordinator, error) {
	cfg := config{
		Options:       storekit.Options{Store: "isr", Now: time.Now},
		leaseDuration: 30 * time.Second,
		ttlBuffer:     time.Hour,
		requestTTL:    24 * time.Hour,
		retryFailed:   true,
		acquireTries:  4,
		revalidate:    60 * time.Second,
	}
	if table == nil {
		cfg.Invalid("NewCoordinator", "table is nil")
	}
	for _, o := range opts {
		if o == nil {
			cfg.Invalid("NewCoordinator", "nil option")
			continue
		}
		o(&cfg)
	}
	if err := cfg.Err(); err != nil {
		return nil, err
	}
	return &Coordinator{table: table, cfg: cfg}, nil
}

// check refuses a Coordinator that NewCoordinator did not make.
func (c *Coordinator) check() error {
	if c == nil || c.table == nil {
		return unmade("Coordinator", "NewCoordinator")
	}
	return nil
}

// Table returns the table the Coordinator works on (nil for a nil or zero
// Coordinator).
func (c *Coordinator) Table() Table {
	if c == nil {
		return nil
	}
	return c.table
}

// Now returns the Coordinator's clock reading (the zero time for a nil or
// zero Coordinator, which every Table refuses).
func (c *Coordinator) Now() time.Time {
	if c.check() != nil {
		return time.Time{}
	}
	return c.cfg.Now()
}

// Lookup returns META for pk, or ErrNotFound. Use Meta.Fresh with Now to
// decide whether to serve or regenerate. A META whose revalidate_seconds
// is missing (Meta.RevalidateMissing) gets the WithDefaultRevalidate
// window.
func (c *Coordinator) Lookup(ctx context.Context, pk string) (Meta, error) {
	if err := c.check(); err != nil {
		return Meta{}, err
	}
	return c.getMeta(ctx, pk)
}

// getMeta is the table's META for pk with the default freshness window
// filled in.
func (c *Coordinator) getMeta(ctx context.Context, pk string) (Meta, error) {
	m, err := c.table.GetMeta(ctx, pk)
	if err != nil {
		return Meta{}, err
	}
	return c.withDefaults(m), nil
}

// withDefaults is m with the default freshness window when it has none of
// its own (RevalidateMissing, as a Table reads it).
func (c *Coordinator) withDefaults(m Meta) Meta {
	if m.RevalidateMissing && m.RevalidateSeconds == 0 && m.RevalidateSecondsN == "" {
		m.RevalidateSeconds = seconds(c.cfg.revalidate)
	}
	return m
}

// TryAcquire acquires the lease on pk for the configured duration, with a
// fresh random token, without waiting. A lease held by another worker is
// *LeaseHeldError (ErrLeaseHeld). When seen is non-nil (the META the caller
// read, or &Meta{} if it found none), the acquire is refused with
// ErrMetaChanged if META has been published since. Concurrent-transaction
// conflicts are retried briefly, then reported as ErrConflict.
func (c *Coordinator) TryAcquire(ctx context.Context, pk string, seen *Meta) (Lease, error) {
	if err := c.check(); err != nil {
		return Lease{}, err
	}
	var err error
	for try := 0; try < c.cfg.acquireTries; try++ {
		if try > 0 {
			if werr := sleepJitter(ctx, try); werr != nil {
				return Lease{}, werr
			}
		}
		token, terr := NewToken()
		if terr != nil {
			return Lease{}, terr
		}
		now := c.cfg.Now()
		exp := ceilUnix(now) + seconds(c.cfg.leaseDuration)
		in := AcquireInput{PK: pk, Token: token, Now: now, ExpiresAt: exp, TTL: exp + seconds(c.cfg.ttlBuffer)}
		if seen != nil {
			g := seen.GeneratedAt
			in.IfMetaNotNewer = &g
			in.IfMetaNotNewerN = seen.GeneratedAtN // the exact value read is the value conditioned on
		}
		var l Lease
		l, err = c.table.AcquireLease(ctx, in)
		if err == nil || !errors.Is(err, ErrConflict) || errors.Is(err, ErrLeaseHeld) || errors.Is(err, ErrMetaChanged) {
			return l, err
		}
	}
	return Lease{}, err
}

// Refresh extends lease by the configured duration from now, if it is still
// held with its token; otherwise ErrLeaseLost.
func (c *Coordinator) Refresh(ctx context.Context, lease Lease) (Lease, error) {
	if err := c.check(); err != nil {
		return Lease{}, err
	}
	return c.refreshAt(ctx, lease, c.cfg.Now())
}

// refreshAt is Refresh with the clock read at now.
func (c *Coordinator) refreshAt(ctx context.Context, lease Lease, now time.Time) (Lease, error) {
	exp := ceilUnix(now) + seconds(c.cfg.leaseDuration)
	return c.table.RefreshLease(ctx, RefreshInput{Lease: lease, Now: now, ExpiresAt: exp, TTL: exp + seconds(c.cfg.ttlBuffer)})
}

// Release gives the lease up (deletes LOCK if it still carries the token).
// ErrLeaseLost means someone else holds it now; nothing was deleted.
func (c *Coordinator) Release(ctx context.Context, lease Lease) error {
	if err := c.check(); err != nil {
		return err
	}
	return c.table.ReleaseLease(ctx, lease)
}

// Page is a regenerated body, ready to publish.
type Page struct {
	S3Key             string    // body store key (required)
	ETag              string    // ETag of the body (quoted, as served); optional
	RevalidateSeconds int64     // freshness window (>= 0)
	GeneratedAt       time.Time // when it was generated; zero means now
	// BaseVersion is, for recipe B, META's Version when the page was
	// regenerated (0 when META was absent). Ignored by recipe A.
	BaseVersion int64
	// VersionID is, for recipe B, the id of the VER# item; "" generates one.
	VersionID string
	// BaseSK is, for recipe B, META's current_sk when the page was
	// regenerated ("VER#<id>"; "" when META had none), filled in by
	// Regenerate with BaseVersion. When set, the publish requires META to
	// still point there and gives that row, now superseded, a ttl of the
	// publish time + WithTTLBuffer, so old versions do not pile up.
	// Ignored by recipe A.
	BaseSK string
}

// Publish publishes page under lease with the configured recipe, releasing
// the lease in the same transaction, and returns the META now stored. A
// stale writer (token replaced, lease expired) gets ErrLeaseLost and
// writes nothing; recipe B may also return ErrVersionConflict or
// ErrVersionExists, the monotonic guard ErrNotNewer. After a refused
// publish the lease is not released; call Release (it fails harmlessly if
// the lease was lost).
func (c *Coordinator) Publish(ctx context.Context, lease Lease, page Page) (Meta, error) {
	return c.publish(ctx, lease, page, nil)
}

// publish publishes once, retrying (with jitter) a transaction that was
// cancelled only because a concurrent transaction touched the same items —
// for example other workers' acquires, which condition-check META. Such a
// refusal wrote nothing and the lease is still ours.
func (c *Coordinator) publish(ctx context.Context, lease Lease, page Page, req *RequestCompletion) (Meta, error) {
	if err := c.check(); err != nil {
		return Meta{}, err
	}
	var (
		m   Meta
		err error
	)
	for try := 0; try < c.cfg.acquireTries; try++ {
		if try > 0 {
			if werr := sleepJitter(ctx, try); werr != nil {
				return Meta{}, werr
			}
		}
		m, err = c.publishOnce(ctx, lease, page, req)
		if !onlyConflict(err) {
			break
		}
	}
	return m, err
}

// onlyConflict reports whether err is a refusal caused by concurrent
// transactions alone (no condition failed).
func onlyConflict(err error) bool {
	var te *TxError
	if !errors.As(err, &te) || len(te.Errors) == 0 {
		return false
	}
	for _, e := range te.Errors {
		if e != ErrConflict {
			return false
		}
	}
	return true
}

func (c *Coordinator) publishOnce(ctx context.Context, lease Lease, page Page, req *RequestCompletion) (Meta, error) {
	now := c.cfg.Now()
	gen := page.GeneratedAt
	if gen.IsZero() {
		gen = now
	}
	var ttl int64
	if c.cfg.metaTTL > 0 {
		ttl = gen.Unix() + seconds(c.cfg.metaTTL)
	}
	if !c.cfg.pointerSwap {
		m := Meta{
			PK:                lease.PK,
			S3Key:             page.S3Key,
			GeneratedAt:       gen.Unix(),
			RevalidateSeconds: page.RevalidateSeconds,
			ETag:              page.ETag,
			TTL:               ttl,
		}
		err := c.table.Publish(ctx, PublishInput{Lease: lease, Now: now, Meta: m, Request: req, Monotonic: c.cfg.monotonic})
		if err != nil {
			return Meta{}, err
		}
		return m, nil
	}
	id := page.VersionID
	if id == "" {
		var err error
		if id, err = NewVersionID(gen); err != nil {
			return Meta{}, err
		}
	}
	var previous string
	var previousTTL int64
	if page.BaseSK != "" && page.BaseSK != VersionSKPrefix+id {
		previous, previousTTL = page.BaseSK, ceilUnix(now)+seconds(c.cfg.ttlBuffer)
	}
	return c.table.PublishPointer(ctx, PublishPointerInput{
		Lease: lease,
		Now:   now,
		Version: Version{
			PK: lease.PK, ID: id, S3Key: page.S3Key, GeneratedAt: gen.Unix(), ETag: page.ETag, TTL: ttl,
		},
		RevalidateSeconds: page.RevalidateSeconds,
		MetaTTL:           ttl,
		ExpectedVersion:   page.BaseVersion,
		Previous:          previous,
		PreviousTTL:       previousTTL,
		Request:           req,
		Monotonic:         c.cfg.monotonic,
	})
}

// RequestSpec names a regeneration intent for the request-id flow.
type RequestSpec struct {
	Key  string // idempotency key: RequestIDKey, MessageIDKey or VersionedKey
	Hash string // request_hash of the inputs that matter (see RequestHash)
}

// RenderFunc regenerates a page while the caller holds lease: it writes the
// body to the body store and returns its key and ETag. ctx is cancelled
// (cause ErrLeaseLost) if a lease refresh finds the lease lost, or (cause a
// *LapseError, which matches ErrLeaseLost) if no refresh succeeded in time
// to keep the lease; the page is then not published. For recipe B,
// Page.BaseVersion is filled in by Regenerate when left 0.
type RenderFunc func(ctx context.Context, lease Lease) (Page, error)

// Outcome says what Regenerate did.
type Outcome int

// Regenerate outcomes.
const (
	// OutcomeFresh: META is fresh (or became fresh while we looked); serve it.
	OutcomeFresh Outcome = iota + 1
	// OutcomeRecorded: the request's REQ# item is COMPLETED; ResultS3Key is
	// its recorded result.
	OutcomeRecorded
	// OutcomeInProgress: another worker holds the lease or the request is
	// STARTED; serve Meta (stale) if HasMeta, without waiting.
	OutcomeInProgress
	// OutcomeRegenerated: this call rendered and published Meta.
	OutcomeRegenerated
)

func (o Outcome) String() string {
	switch o {
	case OutcomeFresh:
		return "fresh"
	case OutcomeRecorded:
		return "recorded"
	case OutcomeInProgress:
		return "in-progress"
	case OutcomeRegenerated:
		return "regenerated"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// Result is what Regenerate returns.
type Result struct {
	Outcome     Outcome
	Meta        Meta   // META as read, or as published (OutcomeRegenerated)
	HasMeta     bool   // whether Meta holds a META item
	ResultS3Key string // OutcomeRecorded: result_s3_key; OutcomeRegenerated: the published s3_key
}

// Regenerate runs the whole flow for pk:
//
//  1. read META; fresh -> OutcomeFresh (no lease, no request record);
//  2. if req is non-nil, create REQ# (STARTED, request_hash) if absent:
//     COMPLETED -> OutcomeRecorded; STARTED -> OutcomeInProgress; different
//     hash -> ErrRequestMismatch (fail closed); FAILED -> run again, or
//     ErrRequestFailed under WithRetryFailedRequests(false);
//  3. acquire the lease, conditioned on META not having been published
//     since step 1: held -> OutcomeInProgress (the caller serves stale at
//     once, never waiting on the holder); META changed -> OutcomeFresh;
//  4. render;
//  5. publish (recipe A or B) and complete REQ# in one transaction, releasing
//     the lease.
//
// A fresh regeneration without a request is 2 store requests after the META
// read (acquire, publish); with a request, 3. On a render or publish error
// the request is marked FAILED and the lease released (best effort), and
// the error is returned.
func (c *Coordinator) Regenerate(ctx context.Context, pk string, req *RequestSpec, render RenderFunc) (Result, error) {
	if err := c.check(); err != nil {
		return Result{}, err
	}
	if render == nil {
		return Result{}, invalid("render", "nil RenderFunc")
	}
	meta, err := c.getMeta(ctx, pk)
	hasMeta := err == nil
	if err != nil && !errors.Is(err, ErrNotFound) {
		return Result{}, err
	}
	if !hasMeta {
		meta = Meta{}
	}
	return c.regenerate(ctx, pk, meta, hasMeta, req, render)
}

// RegenerateFrom is Regenerate for a caller that has already read META (a
// server that just served the stale page from it): seen is that META, or
// nil when there was none. It skips Regenerate's own read, so a
// regeneration without a request costs acquire + publish, 2 store
// requests. Using an older read is safe: the lease is only granted if META
// has not been published since seen, otherwise the outcome is OutcomeFresh
// with the current META.
func (c *Coordinator) RegenerateFrom(ctx context.Context, pk string, seen *Meta, req *RequestSpec, render RenderFunc) (Result, error) {
	if err := c.check(); err != nil {
		return Result{}, err
	}
	if render == nil {
		return Result{}, invalid("render", "nil RenderFunc")
	}
	if seen == nil {
		return c.regenerate(ctx, pk, Meta{}, false, req, render)
	}
	return c.regenerate(ctx, pk, c.withDefaults(*seen), true, req, render)
}

func (c *Coordinator) regenerate(ctx context.Context, pk string, meta Meta, hasMeta bool, req *RequestSpec, render RenderFunc) (Result, error) {
	if hasMeta && meta.Fresh(c.cfg.Now()) {
		return Result{Outcome: OutcomeFresh, Meta: meta, HasMeta: true}, nil
	}
	var started bool
	if req != nil {
		if res, done, err := c.beginRequest(ctx, pk, meta, hasMeta, req); err != nil || done {
			return res, err
		}
		started = true
	}
	abandon := func() {
		if started {
			bg, cancel := c.cleanupContext(ctx)
			defer cancel()
			_ = c.table.AbandonRequest(bg, pk, req.Key, req.Hash)
		}
	}
	lease, err := c.TryAcquire(ctx, pk, &meta)
	switch {
	case err == nil:
	case errors.Is(err, ErrLeaseHeld), errors.Is(err, ErrConflict):
		abandon()
		return Result{Outcome: OutcomeInProgress, Meta: meta, HasMeta: hasMeta}, nil
	case errors.Is(err, ErrMetaChanged):
		abandon()
		m, gerr := c.getMeta(ctx, pk)
		if gerr != nil {
			return Result{}, gerr
		}
		return Result{Outcome: OutcomeFresh, Meta: m, HasMeta: true}, nil
	default:
		abandon()
		return Result{}, err
	}

	fail := func(cause error) (Result, error) {
		bg, cancel := c.cleanupContext(ctx)
		defer cancel()
		if started {
			_ = c.table.FailRequest(bg, pk, req.Key, req.Hash)
		}
		_ = c.table.ReleaseLease(bg, lease)
		return Result{}, cause
	}

	page, lease, err := c.renderWithRefresh(ctx, lease, render)
	if err != nil {
		return fail(err)
	}
	if page.BaseVersion == 0 {
		page.BaseVersion = meta.Version
	}
	if page.BaseSK == "" && page.BaseVersion == meta.Version {
		page.BaseSK = meta.CurrentSK
	}
	var comp *RequestCompletion
	if started {
		comp = &RequestCompletion{Key: req.Key, Hash: req.Hash}
	}
	published, err := c.publish(ctx, lease, page, comp)
	if err != nil {
		return fail(err)
	}
	return Result{Outcome: OutcomeRegenerated, Meta: published, HasMeta: true, ResultS3Key: published.S3Key}, nil
}

// beginRequest records req as started on pk before a regeneration. done
// says the request is recorded already and needs no regeneration: res is
// then OutcomeRecorded (completed, with its result) or OutcomeInProgress
// (started by another caller), with meta. A request recorded as failed is
// a *RequestError wrapping ErrRequestFailed.
func (c *Coordinator) beginRequest(ctx context.Context, pk string, meta Meta, hasMeta bool, req *RequestSpec) (res Result, done bool, err error) {
	now := c.cfg.Now()
	r, created, err := c.table.BeginRequest(ctx, BeginRequestInput{
		PK: pk, Key: req.Key, Hash: req.Hash, Now: now,
		TTL: now.Unix() + seconds(c.cfg.requestTTL), RetryFailed: c.cfg.retryFailed,
	})
	if err != nil || created {
		return Result{}, false, err
	}
	switch r.Status {
	case RequestCompleted:
		return Result{Outcome: OutcomeRecorded, Meta: meta, HasMeta: hasMeta, ResultS3Key: r.ResultS3Key}, true, nil
	case RequestStarted:
		return Result{Outcome: OutcomeInProgress, Meta: meta, HasMeta: hasMeta}, true, nil
	default:
		return Result{}, false, &RequestError{PK: pk, Request: r, Err: ErrRequestFailed}
	}
}

// cleanupContext is the context of a best-effort clean-up (giving back a
// request record or the lease after a failure): it outlives the caller's
// cancellation but not a third of the lease duration, so a table that no
// longer answers cannot hold the caller forever. What it fails to do, the
// items' expiry does.
func (c *Coordinator) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), c.cfg.leaseDuration/3)
}

// renderWithRefresh runs render, refreshing the lease every third of the
// lease duration; a render shorter than that sends no refresh. The
// refreshing is the core's (lease.Refresher), as for a Guard's claim.
//
// The lapse timer cuts the render off when no refresh has succeeded in
// time: it fires half a refresh interval before the lease expires (by the
// Coordinator's clock, counted from when the last successful refresh was
// sent), which leaves two refreshes the chance to succeed and ends the
// render while the lease is still held, so before any other worker could
// acquire it. The render's context is then cancelled with a *LapseError
// (matching ErrLeaseLost) and whatever the render returns is discarded: the
// page is not published. A refresh that hangs (a table cut off without an
// answer) delays nothing: each refresh is bounded by the interval, and the
// lapse timer does not wait for it.
func (c *Coordinator) renderWithRefresh(ctx context.Context, l Lease, render RenderFunc) (Page, Lease, error) {
	rctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	interval := c.cfg.leaseDuration / 3
	h := &renderLease{c: c, current: l}
	var r lease.Refresher
	r.Start(rctx, cancel, time.Now(), h.valid(l, c.cfg.Now()), h, lease.Config{Interval: interval, Margin: interval / 2})
	page, err := render(rctx, l)
	r.Stop()
	l = h.lease()
	if cause := context.Cause(rctx); cause != nil && errors.Is(cause, ErrLeaseLost) {
		// The lease was lost, or could not be kept, during the render:
		// that, not whatever the render made of its cancelled context, is
		// the outcome, and nothing is published.
		return Page{}, l, cause
	}
	return page, l, err
}

// renderLease is the lease.Holder of a render: the lease as last
// refreshed.
type renderLease struct {
	c       *Coordinator
	mu      sync.Mutex
	current Lease
}

func (h *renderLease) lease() Lease {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.current
}

// valid is how long lease l is held from a send at now, by the clock.
func (h *renderLease) valid(l Lease, now time.Time) time.Duration {
	return time.Unix(l.ExpiresAt, 0).Sub(now)
}

// Refresh implements lease.Holder.
func (h *renderLease) Refresh(ctx context.Context) (time.Duration, error) {
	now := h.c.cfg.Now()
	nl, err := h.c.refreshAt(ctx, h.lease(), now)
	if err != nil {
		return 0, err
	}
	h.mu.Lock()
	h.current = nl
	h.mu.Unlock()
	return h.valid(nl, now), nil
}

// Lost implements lease.Holder: ErrLeaseLost is for good; anything else is
// transient (the next interval retries, the lapse timer runs on).
func (h *renderLease) Lost(err error) error {
	if errors.Is(err, ErrLeaseLost) {
		return err
	}
	return nil
}

// Lapsed implements lease.Holder.
func (h *renderLease) Lapsed(_ time.Duration, last error) error {
	cur := h.lease()
	return &LapseError{PK: cur.PK, ExpiresAt: cur.ExpiresAt, Err: last}
}

// NewToken returns a fresh random lease token (128 bits, hex). The error
// is always nil.
func NewToken() (string, error) {
	return lease.Token(), nil
}

// NewVersionID returns a version id that sorts by generation time:
// "<generated_at as 10-digit epoch seconds>-<8 random hex>". The error is
// always nil.
func NewVersionID(generatedAt time.Time) (string, error) {
	return fmt.Sprintf("%010d-%s", generatedAt.Unix(), lease.RandomHex(4)), nil
}

// ceilUnix is now in epoch seconds, rounded up, so that a lease of d
// seconds lasts at least d (and less than d+1s) of real time.
func ceilUnix(now time.Time) int64 {
	s := now.Unix()
	if now.Nanosecond() != 0 {
		s++
	}
	return s
}

func seconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// sleepJitter waits before retry try (1, 2, ...): a jittered 20ms, doubled
// per try, or until ctx ends.
func sleepJitter(ctx context.Context, try int) error {
	return lease.Sleep(ctx, lease.Jitter(10*time.Millisecond<<try))
}
