package isrtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/isr"
)

func newCoord(t *testing.T, tb isr.Table, clock *Clock, opts ...isr.Option) *isr.Coordinator {
	t.Helper()
	opts = append([]isr.Option{isr.WithClock(clock.Now), isr.WithLeaseDuration(30 * time.Second)}, opts...)
	c, err := isr.NewCoordinator(tb, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// counter is a RenderFunc that counts calls and returns pages named after
// the call number.
type counter struct {
	n       atomic.Int32
	holders atomic.Int32
	maxHeld atomic.Int32
	delay   time.Duration
	err     error
}

func (c *counter) render(ctx context.Context, l isr.Lease) (isr.Page, error) {
	h := c.holders.Add(1)
	defer c.holders.Add(-1)
	for {
		m := c.maxHeld.Load()
		if h <= m || c.maxHeld.CompareAndSwap(m, h) {
			break
		}
	}
	n := c.n.Add(1)
	if c.delay > 0 {
		time.Sleep(c.delay)
	}
	if c.err != nil {
		return isr.Page{}, c.err
	}
	return isr.Page{S3Key: fmt.Sprintf("pages/%d.html", n), ETag: fmt.Sprintf(`"etag-%d"`, n), RevalidateSeconds: 60}, nil
}

func expect(t *testing.T, want isr.Outcome) func(isr.Result, error) isr.Result {
	return func(res isr.Result, err error) isr.Result {
		t.Helper()
		if err != nil {
			t.Fatalf("Regenerate: %v", err)
		}
		if res.Outcome != want {
			t.Fatalf("outcome = %v, want %v (%+v)", res.Outcome, want, res)
		}
		return res
	}
}

func testCoordinatorFlow(t *testing.T, tb isr.Table) {
	ctx, pk, clock := ctxT(t), NewPK(t), NewClock(Base())
	c := newCoord(t, tb, clock)
	var r counter
	_, err := c.Lookup(ctx, pk)
	wantErr(t, err, isr.ErrNotFound)
	// Missing page: rendered and published.
	res := expect(t, isr.OutcomeRegenerated)(c.Regenerate(ctx, pk, nil, r.render))
	want := isr.Meta{PK: pk, S3Key: "pages/1.html", GeneratedAt: Base().Unix(), RevalidateSeconds: 60, ETag: `"etag-1"`}
	if res.Meta != want || !res.HasMeta || res.ResultS3Key != "pages/1.html" {
		t.Fatalf("result = %+v", res)
	}
	if got := must(c.Lookup(ctx, pk))(t); got != want {
		t.Fatalf("META = %+v, want %+v", got, want)
	}
	_, err = tb.GetLease(ctx, pk)
	wantErr(t, err, isr.ErrNotFound)
	// Fresh: nothing rendered.
	clock.Advance(59 * time.Second)
	expect(t, isr.OutcomeFresh)(c.Regenerate(ctx, pk, nil, r.render))
	if r.n.Load() != 1 {
		t.Fatal("fresh page was rendered")
	}
	// Stale while another worker holds the lease: in progress, stale META
	// returned, no waiting, no render.
	clock.Advance(time.Second)
	other := must(c.TryAcquire(ctx, pk, nil))(t)
	res = expect(t, isr.OutcomeInProgress)(c.Regenerate(ctx, pk, nil, r.render))
	if !res.HasMeta || res.Meta != want || r.n.Load() != 1 {
		t.Fatalf("in-progress result = %+v, renders %d", res, r.n.Load())
	}
	_, err = c.TryAcquire(ctx, pk, nil)
	wantErr(t, err, isr.ErrLeaseHeld)
	noErr(t, c.Release(ctx, other))
	wantErr(t, c.Release(ctx, other), isr.ErrLeaseLost)
	// Stale and free: regenerated.
	res = expect(t, isr.OutcomeRegenerated)(c.Regenerate(ctx, pk, nil, r.render))
	if res.Meta.S3Key != "pages/2.html" || res.Meta.GeneratedAt != Base().Unix()+60 {
		t.Fatalf("result = %+v", res)
	}
	// Manual: TryAcquire + Publish + (lease already gone) Release.
	clock.Advance(time.Hour)
	seen := must(c.Lookup(ctx, pk))(t)
	l := must(c.TryAcquire(ctx, pk, &seen))(t)
	if l.ExpiresAt != clock.Now().Unix()+30 || l.TTL != l.ExpiresAt+3600 || len(l.Token) != 32 {
		t.Fatalf("lease = %+v", l)
	}
	m := must(c.Publish(ctx, l, isr.Page{S3Key: "manual", ETag: `"m"`, RevalidateSeconds: 5}))(t)
	if m.S3Key != "manual" || m.GeneratedAt != clock.Now().Unix() {
		t.Fatalf("published = %+v", m)
	}
	wantErr(t, c.Release(ctx, l), isr.ErrLeaseLost)
	// A caller that saw the older META cannot acquire: it would redo work.
	_, err = c.TryAcquire(ctx, pk, &seen)
	wantErr(t, err, isr.ErrMetaChanged)
}

func testCoordinatorRequestFlow(t *testing.T, tb isr.Table) {
	ctx, pk, clock := ctxT(t), NewPK(t), NewClock(Base())
	c := newCoord(t, tb, clock)
	var r counter
	h := isr.RequestHash("tenant", "/p", "policy-1")
	req := &isr.RequestSpec{Key: "req-1", Hash: h}
	res := expect(t, isr.OutcomeRegenerated)(c.Regenerate(ctx, pk, req, r.render))
	stored := must(tb.GetRequest(ctx, pk, "req-1"))(t)
	if stored.Status != isr.RequestCompleted || stored.ResultS3Key != res.Meta.S3Key || stored.Hash != h || stored.TTL != Base().Unix()+86400 {
		t.Fatalf("REQ# = %+v", stored)
	}
	// Fresh META short-circuits, even for a mismatching request.
	expect(t, isr.OutcomeFresh)(c.Regenerate(ctx, pk, &isr.RequestSpec{Key: "req-1", Hash: "other"}, r.render))
	// Stale: COMPLETED returns the recorded result without rendering.
	clock.Advance(2 * time.Minute)
	res = expect(t, isr.OutcomeRecorded)(c.Regenerate(ctx, pk, req, r.render))
	if res.ResultS3Key != "pages/1.html" || r.n.Load() != 1 {
		t.Fatalf("recorded = %+v, renders %d", res, r.n.Load())
	}
	// Different request_hash: fail closed.
	_, err := c.Regenerate(ctx, pk, &isr.RequestSpec{Key: "req-1", Hash: "other"}, r.render)
	wantErr(t, err, isr.ErrRequestMismatch)
	// STARTED elsewhere: in progress, stale META, no render.
	must3(t)(tb.BeginRequest(ctx, isr.BeginRequestInput{PK: pk, Key: "req-2", Hash: h, Now: clock.Now(), TTL: clock.Now().Unix() + 60}))
	res = expect(t, isr.OutcomeInProgress)(c.Regenerate(ctx, pk, &isr.RequestSpec{Key: "req-2", Hash: h}, r.render))
	if !res.HasMeta || res.Meta.S3Key != "pages/1.html" || r.n.Load() != 1 {
		t.Fatalf("in progress = %+v", res)
	}
	// Lease held by another worker: in progress, and the request record is
	// given back so a retry is not told about work nobody does.
	other := must(c.TryAcquire(ctx, pk, nil))(t)
	expect(t, isr.OutcomeInProgress)(c.Regenerate(ctx, pk, &isr.RequestSpec{Key: "req-3", Hash: h}, r.render))
	_, err = tb.GetRequest(ctx, pk, "req-3")
	wantErr(t, err, isr.ErrNotFound)
	noErr(t, c.Release(ctx, other))
	// Render failure: FAILED, lease released, error returned.
	boom := errors.New("render exploded")
	bad := counter{err: boom}
	_, err = c.Regenerate(ctx, pk, &isr.RequestSpec{Key: "req-4", Hash: h}, bad.render)
	wantErr(t, err, boom)
	if st := must(tb.GetRequest(ctx, pk, "req-4"))(t); st.Status != isr.RequestFailed {
		t.Fatalf("REQ# after failure = %+v", st)
	}
	_, err = tb.GetLease(ctx, pk)
	wantErr(t, err, isr.ErrNotFound)
	// Under WithRetryFailedRequests(false) the failure is final.
	strict := newCoord(t, tb, clock, isr.WithRetryFailedRequests(false))
	_, err = strict.Regenerate(ctx, pk, &isr.RequestSpec{Key: "req-4", Hash: h}, r.render)
	wantErr(t, err, isr.ErrRequestFailed)
	// By default it is run again.
	res = expect(t, isr.OutcomeRegenerated)(c.Regenerate(ctx, pk, &isr.RequestSpec{Key: "req-4", Hash: h}, r.render))
	if st := must(tb.GetRequest(ctx, pk, "req-4"))(t); st.Status != isr.RequestCompleted || st.ResultS3Key != res.Meta.S3Key {
		t.Fatalf("REQ# after retry = %+v", st)
	}
}

func testCoordinatorPointer(t *testing.T, tb isr.Table) {
	ctx, pk, clock := ctxT(t), NewPK(t), NewClock(Base())
	c := newCoord(t, tb, clock, isr.WithPointerSwap(), isr.WithMetaTTL(24*time.Hour), isr.WithMonotonicGeneratedAt())
	var r counter
	res := expect(t, isr.OutcomeRegenerated)(c.Regenerate(ctx, pk, &isr.RequestSpec{Key: "a", Hash: "h"}, r.render))
	m := res.Meta
	if m.Version != 1 || m.ETag != `"etag-1"` || m.S3Key != "pages/1.html" || m.TTL != Base().Unix()+86400 || len(m.CurrentSK) < 5 {
		t.Fatalf("META = %+v", m)
	}
	v := must(tb.GetVersion(ctx, pk, m.CurrentSK[len(isr.VersionSKPrefix):]))(t)
	if v.S3Key != m.S3Key || v.ETag != m.ETag || v.GeneratedAt != m.GeneratedAt {
		t.Fatalf("VER# = %+v", v)
	}
	clock.Advance(2 * time.Minute)
	res = expect(t, isr.OutcomeRegenerated)(c.Regenerate(ctx, pk, nil, r.render))
	if res.Meta.Version != 2 || res.Meta.CurrentSK == m.CurrentSK {
		t.Fatalf("META = %+v", res.Meta)
	}
	if got := must(c.Lookup(ctx, pk))(t); got != res.Meta {
		t.Fatalf("stored META = %+v, want %+v", got, res.Meta)
	}
	// A publisher that regenerated from version 1 is refused.
	clock.Advance(2 * time.Minute)
	cur := must(c.Lookup(ctx, pk))(t)
	l := must(c.TryAcquire(ctx, pk, &cur))(t)
	_, err := c.Publish(ctx, l, isr.Page{S3Key: "old", RevalidateSeconds: 1, BaseVersion: 1})
	wantErr(t, err, isr.ErrVersionConflict)
	if got := must(c.Lookup(ctx, pk))(t); got != cur {
		t.Fatalf("META changed by a refused publish: %+v", got)
	}
	noErr(t, c.Release(ctx, l))
}

func testCoordinatorStale(t *testing.T, tb isr.Table) {
	ctx, pk := ctxT(t), NewPK(t)
	clockA, clockB := NewClock(Base()), NewClock(Base())
	a, b := newCoord(t, tb, clockA), newCoord(t, tb, clockB)
	// Expired: A acquires, its lease runs out, nobody takes over.
	la := must(a.TryAcquire(ctx, pk, &isr.Meta{}))(t)
	clockA.Advance(30 * time.Second)
	_, err := a.Publish(ctx, la, isr.Page{S3Key: "A-expired", RevalidateSeconds: 60})
	wantErr(t, err, isr.ErrLeaseLost)
	_, err = a.Lookup(ctx, pk)
	wantErr(t, err, isr.ErrNotFound)
	// Stolen: A acquires again; B's clock passes A's expiry and B takes
	// over; A, whose clock still says its lease is valid, cannot publish.
	la = must(a.TryAcquire(ctx, pk, &isr.Meta{}))(t)
	clockB.Set(clockA.Now().Add(31 * time.Second))
	lb := must(b.TryAcquire(ctx, pk, &isr.Meta{}))(t)
	_, err = a.Publish(ctx, la, isr.Page{S3Key: "A-stolen", RevalidateSeconds: 60})
	wantErr(t, err, isr.ErrLeaseLost)
	_, err = a.Refresh(ctx, la)
	wantErr(t, err, isr.ErrLeaseLost)
	wantErr(t, a.Release(ctx, la), isr.ErrLeaseLost)
	mb := must(b.Publish(ctx, lb, isr.Page{S3Key: "B", ETag: `"b"`, RevalidateSeconds: 60}))(t)
	// And after B published and released, A is still refused.
	_, err = a.Publish(ctx, la, isr.Page{S3Key: "A-late", RevalidateSeconds: 60})
	wantErr(t, err, isr.ErrLeaseLost)
	if got := must(a.Lookup(ctx, pk))(t); got != mb {
		t.Fatalf("META = %+v, want B's %+v", got, mb)
	}
}

func testCoordinatorRenderFailure(t *testing.T, tb isr.Table) {
	ctx, pk, clock := ctxT(t), NewPK(t), NewClock(Base())
	c := newCoord(t, tb, clock)
	boom := errors.New("boom")
	bad := counter{err: boom}
	_, err := c.Regenerate(ctx, pk, nil, bad.render)
	wantErr(t, err, boom)
	_, err = tb.GetLease(ctx, pk)
	wantErr(t, err, isr.ErrNotFound)
	_, err = c.Lookup(ctx, pk)
	wantErr(t, err, isr.ErrNotFound)
	_, err = c.Regenerate(ctx, pk, nil, nil)
	wantErr(t, err, isr.ErrInvalidInput)
	// A render that returns an unpublishable page is an input error, and
	// the lease is given back.
	_, err = c.Regenerate(ctx, pk, nil, func(context.Context, isr.Lease) (isr.Page, error) { return isr.Page{}, nil })
	wantErr(t, err, isr.ErrInvalidInput)
	_, err = tb.GetLease(ctx, pk)
	wantErr(t, err, isr.ErrNotFound)
}

// testCoordinatorOneRegeneration: 32 goroutines ask for one stale page at
// once. Exactly one renders; the render does not finish until every other
// caller has returned, which proves they are answered (with the stale META)
// without waiting for the regeneration.
func testCoordinatorOneRegeneration(t *testing.T, tb isr.Table) {
	ctx, pk, clock := ctxT(t), NewPK(t), NewClock(Base())
	c := newCoord(t, tb, clock)
	var setup counter
	expect(t, isr.OutcomeRegenerated)(c.Regenerate(ctx, pk, nil, setup.render))
	clock.Advance(61 * time.Second) // stale
	const n = 32
	var renders, returned atomic.Int32
	render := func(ctx context.Context, l isr.Lease) (isr.Page, error) {
		renders.Add(1)
		deadline := time.Now().Add(20 * time.Second)
		for returned.Load() < n-1 {
			if time.Now().After(deadline) {
				return isr.Page{}, fmt.Errorf("only %d of %d other callers returned while the page was rendering", returned.Load(), n-1)
			}
			time.Sleep(time.Millisecond)
		}
		return isr.Page{S3Key: "new", RevalidateSeconds: 60}, nil
	}
	var wg sync.WaitGroup
	outcomes := make([]isr.Outcome, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			res, err := c.Regenerate(ctx, pk, nil, render)
			if err != nil {
				t.Error(err)
				return
			}
			if !res.HasMeta {
				t.Error("a stale page must be served from META")
			}
			outcomes[i] = res.Outcome
			if res.Outcome != isr.OutcomeRegenerated {
				returned.Add(1)
			}
		}(i)
	}
	wg.Wait()
	regenerated := 0
	for _, o := range outcomes {
		if o == isr.OutcomeRegenerated {
			regenerated++
		}
	}
	if renders.Load() != 1 || regenerated != 1 {
		t.Fatalf("%d renders, %d regenerated outcomes for one stale page; outcomes %v", renders.Load(), regenerated, outcomes)
	}
}

// afterGetMeta is a Table whose GetMeta runs hook (once) after reading META
// and before returning it: the read goes stale while its caller holds it.
type afterGetMeta struct {
	isr.Table
	once sync.Once
	hook func()
}

func (a *afterGetMeta) GetMeta(ctx context.Context, pk string) (isr.Meta, error) {
	m, err := a.Table.GetMeta(ctx, pk)
	a.once.Do(a.hook)
	return m, err
}

// testCoordinatorStraggler: worker A reads the stale META; before it
// acquires, worker B regenerates, publishes and releases the lease. A must
// not render the page a second time: its acquire is conditioned on META as
// it saw it, and it reports the page fresh.
func testCoordinatorStraggler(t *testing.T, tb isr.Table) {
	ctx, pk, clock := ctxT(t), NewPK(t), NewClock(Base())
	b := newCoord(t, tb, clock)
	var r counter
	expect(t, isr.OutcomeRegenerated)(b.Regenerate(ctx, pk, nil, r.render))
	clock.Advance(2 * time.Minute) // stale
	slow := &afterGetMeta{Table: tb}
	slow.hook = func() {
		expect(t, isr.OutcomeRegenerated)(b.Regenerate(ctx, pk, nil, r.render))
	}
	a := newCoord(t, slow, clock)
	res := expect(t, isr.OutcomeFresh)(a.Regenerate(ctx, pk, nil, r.render))
	if r.n.Load() != 2 || res.Meta.S3Key != "pages/2.html" {
		t.Fatalf("renders = %d (want 1 setup + 1), result %+v", r.n.Load(), res)
	}
	// The same with a request record: it is given back, not left STARTED.
	clock.Advance(2 * time.Minute)
	slow2 := &afterGetMeta{Table: tb}
	slow2.hook = func() {
		expect(t, isr.OutcomeRegenerated)(b.Regenerate(ctx, pk, nil, r.render))
	}
	a2 := newCoord(t, slow2, clock)
	expect(t, isr.OutcomeFresh)(a2.Regenerate(ctx, pk, &isr.RequestSpec{Key: "straggler", Hash: "h"}, r.render))
	if r.n.Load() != 3 {
		t.Fatalf("renders = %d, want 3", r.n.Load())
	}
	_, err := tb.GetRequest(ctx, pk, "straggler")
	wantErr(t, err, isr.ErrNotFound)
}
