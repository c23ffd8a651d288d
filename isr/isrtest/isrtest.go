// Package isrtest is the conformance suite for isr.Table implementations.
// isr.MemoryTable, isr.FileTable, dynamoisr.Table and redisisr.Table all
// run it; a third-party Table can too:
//
//	func TestConformance(t *testing.T) {
//		isrtest.Run(t, func(t *testing.T) isr.Table { return newMyTable(t) })
//	}
//
// Each call of newTable must return a table isolated from the others. Every
// time the suite passes is explicit (a fixed base instant plus offsets), so
// the suite never sleeps and expiry is checked exactly at the boundary.
package isrtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/isr"
)

// Base returns the instant the suite calls "now".
func Base() time.Time { return time.Unix(1_700_000_000, 0) }

// at returns Base() + s seconds.
func at(s int64) time.Time { return Base().Add(time.Duration(s) * time.Second) }

// NewPK returns a fresh random partition key.
func NewPK(t testing.TB) string {
	t.Helper()
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	pk, err := isr.PK("", "/page/"+hex.EncodeToString(b[:]))
	if err != nil {
		t.Fatal(err)
	}
	return pk
}

// Clock is a settable clock for Coordinator tests.
type Clock struct{ ns atomic.Int64 }

// NewClock returns a clock reading t.
func NewClock(t time.Time) *Clock { c := &Clock{}; c.Set(t); return c }

// Now reads the clock.
func (c *Clock) Now() time.Time { return time.Unix(0, c.ns.Load()) }

// Set sets the clock.
func (c *Clock) Set(t time.Time) { c.ns.Store(t.UnixNano()) }

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// Run runs the conformance suite.
func Run(t *testing.T, newTable func(t *testing.T) isr.Table) {
	t.Run("Missing", func(t *testing.T) { testMissing(t, newTable(t)) })
	t.Run("Acquire", func(t *testing.T) { testAcquire(t, newTable(t)) })
	t.Run("AcquireInvalid", func(t *testing.T) { testAcquireInvalid(t, newTable(t)) })
	t.Run("AcquireIfMetaNotNewer", func(t *testing.T) { testAcquireIfMeta(t, newTable(t)) })
	t.Run("AcquireConcurrent", func(t *testing.T) { testAcquireConcurrent(t, newTable(t)) })
	t.Run("Refresh", func(t *testing.T) { testRefresh(t, newTable(t)) })
	t.Run("Release", func(t *testing.T) { testRelease(t, newTable(t)) })
	t.Run("PublishA", func(t *testing.T) { testPublishA(t, newTable(t)) })
	t.Run("PublishAStaleWriters", func(t *testing.T) { testPublishAStale(t, newTable(t)) })
	t.Run("PublishARequest", func(t *testing.T) { testPublishARequest(t, newTable(t)) })
	t.Run("PublishAMonotonic", func(t *testing.T) { testPublishAMonotonic(t, newTable(t)) })
	t.Run("PublishB", func(t *testing.T) { testPublishB(t, newTable(t)) })
	t.Run("PublishBGuards", func(t *testing.T) { testPublishBGuards(t, newTable(t)) })
	t.Run("PublishBRequest", func(t *testing.T) { testPublishBRequest(t, newTable(t)) })
	t.Run("PublishBPrevious", func(t *testing.T) { testPublishBPrevious(t, newTable(t)) })
	t.Run("Requests", func(t *testing.T) { testRequests(t, newTable(t)) })
	t.Run("InvalidInput", func(t *testing.T) { testInvalid(t, newTable(t)) })
	t.Run("CoordinatorFlow", func(t *testing.T) { testCoordinatorFlow(t, newTable(t)) })
	t.Run("CoordinatorRequestFlow", func(t *testing.T) { testCoordinatorRequestFlow(t, newTable(t)) })
	t.Run("CoordinatorPointerSwap", func(t *testing.T) { testCoordinatorPointer(t, newTable(t)) })
	t.Run("CoordinatorStaleWriters", func(t *testing.T) { testCoordinatorStale(t, newTable(t)) })
	t.Run("CoordinatorRenderFailure", func(t *testing.T) { testCoordinatorRenderFailure(t, newTable(t)) })
	t.Run("CoordinatorOneRegeneration", func(t *testing.T) { testCoordinatorOneRegeneration(t, newTable(t)) })
	t.Run("CoordinatorStraggler", func(t *testing.T) { testCoordinatorStraggler(t, newTable(t)) })
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// must returns v, failing t when err is not nil: must(f())(t).
func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return v
	}
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

func wantErr(t *testing.T, err error, targets ...error) {
	t.Helper()
	if err == nil {
		t.Fatalf("want error matching %v, got nil", targets)
	}
	for _, target := range targets {
		if !errors.Is(err, target) {
			t.Fatalf("want error matching %v, got %v", target, err)
		}
	}
}

func wantTx(t *testing.T, err error) *isr.TxError {
	t.Helper()
	var te *isr.TxError
	if !errors.As(err, &te) {
		t.Fatalf("want *isr.TxError, got %T %v", err, err)
	}
	return te
}

func acquire(t *testing.T, tb isr.Table, pk, token string, now, exp int64) isr.Lease {
	t.Helper()
	return must(tb.AcquireLease(ctxT(t), isr.AcquireInput{PK: pk, Token: token, Now: at(now), ExpiresAt: exp, TTL: exp + 3600}))(t)
}

func abs(s int64) int64 { return Base().Unix() + s }

func testMissing(t *testing.T, tb isr.Table) {
	ctx, pk := ctxT(t), NewPK(t)
	_, err := tb.GetMeta(ctx, pk)
	wantErr(t, err, isr.ErrNotFound)
	_, err = tb.GetLease(ctx, pk)
	wantErr(t, err, isr.ErrNotFound)
	_, err = tb.GetRequest(ctx, pk, "r1")
	wantErr(t, err, isr.ErrNotFound)
	_, err = tb.GetVersion(ctx, pk, "v1")
	wantErr(t, err, isr.ErrNotFound)
}

func testAcquire(t *testing.T, tb isr.Table) {
	ctx, pk := ctxT(t), NewPK(t)
	l := acquire(t, tb, pk, "tok-a", 0, abs(30))
	if l.PK != pk || l.Token != "tok-a" || l.ExpiresAt != abs(30) || l.TTL != abs(30)+3600 {
		t.Fatalf("lease = %+v", l)
	}
	got := must(tb.GetLease(ctx, pk))(t)
	if got != l {
		t.Fatalf("GetLease = %+v, want %+v", got, l)
	}
	if !got.Held(at(29)) || got.Held(at(30)) {
		t.Fatal("Held must be lease_expires_at > now")
	}
	// Held at every instant before expiry, including the last second.
	for _, now := range []int64{0, 10, 29} {
		_, err := tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "tok-b", Now: at(now), ExpiresAt: abs(now + 30), TTL: abs(now + 90)})
		wantErr(t, err, isr.ErrLeaseHeld)
		var held *isr.LeaseHeldError
		if !errors.As(err, &held) || held.ExpiresAt != abs(30) || held.PK != pk {
			t.Fatalf("want *LeaseHeldError expiring %d, got %v", abs(30), err)
		}
	}
	if must(tb.GetLease(ctx, pk))(t).Token != "tok-a" {
		t.Fatal("a refused acquire changed the lease")
	}
	// The same token again (an acquire retried after its reply was lost):
	// the lease is the caller's, as stored, with or without the META guard.
	zero := int64(0)
	for _, guard := range []*int64{nil, &zero} {
		again, err := tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "tok-a", Now: at(5), ExpiresAt: abs(35), TTL: abs(95), IfMetaNotNewer: guard})
		if err != nil || again != l {
			t.Fatalf("re-acquire with the holder's token (guard %v): %+v, %v; want %+v", guard != nil, again, err, l)
		}
	}
	// lease_expires_at == now: not held any more.
	l2 := acquire(t, tb, pk, "tok-b", 30, abs(60))
	if must(tb.GetLease(ctx, pk))(t) != l2 {
		t.Fatal("takeover of an expired lease not stored")
	}
}

func testAcquireInvalid(t *testing.T, tb isr.Table) {
	ctx, pk := ctxT(t), NewPK(t)
	cases := []isr.AcquireInput{
		{PK: pk, Token: "", Now: at(0), ExpiresAt: abs(1), TTL: abs(2)},
		{PK: pk, Token: "x", Now: at(0), ExpiresAt: abs(0), TTL: abs(2)},
		{PK: pk, Token: "x", Now: at(0), ExpiresAt: abs(10), TTL: abs(9)},
		{PK: "nope", Token: "x", Now: at(0), ExpiresAt: abs(10), TTL: abs(10)},
		{PK: pk, Token: "x", ExpiresAt: abs(10), TTL: abs(10)},
	}
	for i, in := range cases {
		_, err := tb.AcquireLease(ctx, in)
		if !errors.Is(err, isr.ErrInvalidInput) {
			t.Fatalf("case %d: want ErrInvalidInput, got %v", i, err)
		}
	}
	_, err := tb.GetLease(ctx, pk)
	wantErr(t, err, isr.ErrNotFound)
}

func testAcquireIfMeta(t *testing.T, tb isr.Table) {
	ctx, pk := ctxT(t), NewPK(t)
	zero := int64(0)
	// No META, caller saw none: acquire works.
	l := must(tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "a", Now: at(0), ExpiresAt: abs(30), TTL: abs(90), IfMetaNotNewer: &zero}))(t)
	noErr(t, tb.Publish(ctx, isr.PublishInput{Lease: l, Now: at(1), Meta: isr.Meta{S3Key: "k1", GeneratedAt: abs(1), RevalidateSeconds: 10}}))
	// Caller saw no META, but it has been published since.
	_, err := tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "b", Now: at(2), ExpiresAt: abs(32), TTL: abs(92), IfMetaNotNewer: &zero})
	wantErr(t, err, isr.ErrMetaChanged)
	if errors.Is(err, isr.ErrLeaseHeld) {
		t.Fatalf("lease is free, got %v", err)
	}
	_, err = tb.GetLease(ctx, pk)
	wantErr(t, err, isr.ErrNotFound)
	// Caller saw the current META: acquire works.
	seen := abs(1)
	l2 := must(tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "c", Now: at(20), ExpiresAt: abs(50), TTL: abs(99), IfMetaNotNewer: &seen}))(t)
	// Held and changed: both reported.
	older := abs(0)
	_, err = tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "d", Now: at(21), ExpiresAt: abs(51), TTL: abs(99), IfMetaNotNewer: &older})
	wantErr(t, err, isr.ErrLeaseHeld, isr.ErrMetaChanged)
	var held *isr.LeaseHeldError
	if !errors.As(err, &held) || held.ExpiresAt != abs(50) {
		t.Fatalf("want *LeaseHeldError, got %v", err)
	}
	te := wantTx(t, err)
	if len(te.Reasons) != 2 || te.Reasons[0] != "ConditionalCheckFailed" || te.Reasons[1] != "ConditionalCheckFailed" {
		t.Fatalf("reasons = %v", te.Reasons)
	}
	if must(tb.GetLease(ctx, pk))(t) != l2 {
		t.Fatal("refused acquire changed the lease")
	}
}

func testAcquireConcurrent(t *testing.T, tb isr.Table) {
	ctx, pk := ctxT(t), NewPK(t)
	const n = 24
	var wins atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			_, err := tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: fmt.Sprintf("t%d", i), Now: at(0), ExpiresAt: abs(30), TTL: abs(90)})
			switch {
			case err == nil:
				wins.Add(1)
			case errors.Is(err, isr.ErrLeaseHeld), errors.Is(err, isr.ErrConflict):
			default:
				errs <- err
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if wins.Load() != 1 {
		t.Fatalf("%d goroutines acquired one lease", wins.Load())
	}
}

func testRefresh(t *testing.T, tb isr.Table) {
	ctx, pk := ctxT(t), NewPK(t)
	l := acquire(t, tb, pk, "a", 0, abs(30))
	nl := must(tb.RefreshLease(ctx, isr.RefreshInput{Lease: l, Now: at(20), ExpiresAt: abs(50), TTL: abs(4000)}))(t)
	if nl.ExpiresAt != abs(50) || nl.TTL != abs(4000) || nl.Token != "a" || nl.PK != pk {
		t.Fatalf("refreshed = %+v", nl)
	}
	if must(tb.GetLease(ctx, pk))(t) != nl {
		t.Fatal("refresh not stored")
	}
	// Wrong token.
	_, err := tb.RefreshLease(ctx, isr.RefreshInput{Lease: isr.Lease{PK: pk, Token: "b"}, Now: at(21), ExpiresAt: abs(51), TTL: abs(99)})
	wantErr(t, err, isr.ErrLeaseLost)
	// Expired (lease_expires_at == now).
	_, err = tb.RefreshLease(ctx, isr.RefreshInput{Lease: nl, Now: at(50), ExpiresAt: abs(80), TTL: abs(99)})
	wantErr(t, err, isr.ErrLeaseLost)
	if must(tb.GetLease(ctx, pk))(t) != nl {
		t.Fatal("refused refresh changed the lease")
	}
	// Absent: not created.
	pk2 := NewPK(t)
	_, err = tb.RefreshLease(ctx, isr.RefreshInput{Lease: isr.Lease{PK: pk2, Token: "a"}, Now: at(0), ExpiresAt: abs(30), TTL: abs(99)})
	wantErr(t, err, isr.ErrLeaseLost)
	_, err = tb.GetLease(ctx, pk2)
	wantErr(t, err, isr.ErrNotFound)
}

func testRelease(t *testing.T, tb isr.Table) {
	ctx, pk := ctxT(t), NewPK(t)
	l := acquire(t, tb, pk, "a", 0, abs(30))
	wantErr(t, tb.ReleaseLease(ctx, isr.Lease{PK: pk, Token: "b"}), isr.ErrLeaseLost)
	if must(tb.GetLease(ctx, pk))(t) != l {
		t.Fatal("release with the wrong token changed the lease")
	}
	noErr(t, tb.ReleaseLease(ctx, l))
	_, err := tb.GetLease(ctx, pk)
	wantErr(t, err, isr.ErrNotFound)
	wantErr(t, tb.ReleaseLease(ctx, l), isr.ErrLeaseLost)
	// An expired lease that still carries the token can be released.
	l = acquire(t, tb, pk, "c", 100, abs(130))
	_ = l
	noErr(t, tb.ReleaseLease(ctx, isr.Lease{PK: pk, Token: "c"}))
	_, err = tb.GetLease(ctx, pk)
	wantErr(t, err, isr.ErrNotFound)
}

func testPublishA(t *testing.T, tb isr.Table) {
	ctx, pk := ctxT(t), NewPK(t)
	l := acquire(t, tb, pk, "a", 0, abs(30))
	m := isr.Meta{S3Key: "pages/a.html", GeneratedAt: abs(5), RevalidateSeconds: 60, ETag: `"e1"`, TTL: abs(86400)}
	noErr(t, tb.Publish(ctx, isr.PublishInput{Lease: l, Now: at(5), Meta: m}))
	got := must(tb.GetMeta(ctx, pk))(t)
	m.PK = pk
	if got != m {
		t.Fatalf("META = %+v, want %+v", got, m)
	}
	if !got.Fresh(at(64)) || got.Fresh(at(65)) {
		t.Fatal("Fresh must be generated_at + revalidate_seconds > now")
	}
	_, err := tb.GetLease(ctx, pk)
	wantErr(t, err, isr.ErrNotFound)
	// Second publish replaces META whole: etag and ttl dropped when empty.
	l = acquire(t, tb, pk, "b", 70, abs(100))
	m2 := isr.Meta{S3Key: "pages/b.html", GeneratedAt: abs(71), RevalidateSeconds: 30}
	noErr(t, tb.Publish(ctx, isr.PublishInput{Lease: l, Now: at(71), Meta: m2}))
	m2.PK = pk
	if got := must(tb.GetMeta(ctx, pk))(t); got != m2 {
		t.Fatalf("META = %+v, want %+v", got, m2)
	}
}

func testPublishAStale(t *testing.T, tb isr.Table) {
	ctx, pk := ctxT(t), NewPK(t)
	orig := isr.Meta{PK: pk, S3Key: "orig", GeneratedAt: abs(0), RevalidateSeconds: 1}
	l0 := acquire(t, tb, pk, "setup", 0, abs(10))
	noErr(t, tb.Publish(ctx, isr.PublishInput{Lease: l0, Now: at(0), Meta: orig}))

	// Expired: nobody took over, but the lease ran out.
	lA := acquire(t, tb, pk, "A", 1, abs(31))
	err := tb.Publish(ctx, isr.PublishInput{Lease: lA, Now: at(31), Meta: isr.Meta{S3Key: "A", GeneratedAt: abs(31), RevalidateSeconds: 1}})
	wantErr(t, err, isr.ErrLeaseLost)
	te := wantTx(t, err)
	if te.Reasons[0] != "ConditionalCheckFailed" {
		t.Fatalf("reasons = %v", te.Reasons)
	}
	if got := must(tb.GetMeta(ctx, pk))(t); got != orig {
		t.Fatalf("expired writer changed META: %+v", got)
	}
	// Stolen: B takes over the expired lease; A (whose clock still says its
	// lease is valid) cannot publish; B can.
	lB := acquire(t, tb, pk, "B", 31, abs(61))
	err = tb.Publish(ctx, isr.PublishInput{Lease: lA, Now: at(20), Meta: isr.Meta{S3Key: "A", GeneratedAt: abs(20), RevalidateSeconds: 1}})
	wantErr(t, err, isr.ErrLeaseLost)
	if must(tb.GetLease(ctx, pk))(t) != lB {
		t.Fatal("stale publish touched the new owner's lease")
	}
	if got := must(tb.GetMeta(ctx, pk))(t); got != orig {
		t.Fatalf("stolen-lease writer changed META: %+v", got)
	}
	mB := isr.Meta{PK: pk, S3Key: "B", GeneratedAt: abs(40), RevalidateSeconds: 60}
	noErr(t, tb.Publish(ctx, isr.PublishInput{Lease: lB, Now: at(40), Meta: mB}))
	// After B released: A still cannot publish (no lease at all).
	err = tb.Publish(ctx, isr.PublishInput{Lease: lA, Now: at(41), Meta: isr.Meta{S3Key: "A", GeneratedAt: abs(41), RevalidateSeconds: 1}})
	wantErr(t, err, isr.ErrLeaseLost)
	if got := must(tb.GetMeta(ctx, pk))(t); got != mB {
		t.Fatalf("META = %+v, want B's %+v", got, mB)
	}
}

func testPublishARequest(t *testing.T, tb isr.Table) {
	ctx, pk := ctxT(t), NewPK(t)
	r := must3(t)(tb.BeginRequest(ctx, isr.BeginRequestInput{PK: pk, Key: "req-1", Hash: "h1", Now: at(0), TTL: abs(3600)}))
	if r.Status != isr.RequestStarted || r.Hash != "h1" || r.Key != "req-1" || r.TTL != abs(3600) {
		t.Fatalf("request = %+v", r)
	}
	l := acquire(t, tb, pk, "a", 0, abs(30))
	// REQ# not STARTED with this hash: whole transaction refused.
	err := tb.Publish(ctx, isr.PublishInput{Lease: l, Now: at(1), Meta: isr.Meta{S3Key: "x", GeneratedAt: abs(1)}, Request: &isr.RequestCompletion{Key: "req-1", Hash: "other"}})
	wantErr(t, err, isr.ErrRequestState)
	if errors.Is(err, isr.ErrLeaseLost) {
		t.Fatalf("lease is valid: %v", err)
	}
	te := wantTx(t, err)
	if len(te.Reasons) != 3 || te.Reasons[0] != "None" || te.Reasons[2] != "ConditionalCheckFailed" {
		t.Fatalf("reasons = %v", te.Reasons)
	}
	_, err = tb.GetMeta(ctx, pk)
	wantErr(t, err, isr.ErrNotFound)
	if must(tb.GetLease(ctx, pk))(t) != l {
		t.Fatal("refused transaction deleted the lease")
	}
	noErr(t, tb.Publish(ctx, isr.PublishInput{Lease: l, Now: at(2), Meta: isr.Meta{S3Key: "pages/r.html", GeneratedAt: abs(2), RevalidateSeconds: 5}, Request: &isr.RequestCompletion{Key: "req-1", Hash: "h1"}}))
	r = must(tb.GetRequest(ctx, pk, "req-1"))(t)
	if r.Status != isr.RequestCompleted || r.ResultS3Key != "pages/r.html" || r.Hash != "h1" || r.TTL != abs(3600) {
		t.Fatalf("request after publish = %+v", r)
	}
	// A stale writer with a request cannot complete it either.
	l2 := acquire(t, tb, pk, "b", 10, abs(40))
	must3(t)(tb.BeginRequest(ctx, isr.BeginRequestInput{PK: pk, Key: "req-2", Hash: "h2", Now: at(10), TTL: abs(3600)}))
	err = tb.Publish(ctx, isr.PublishInput{Lease: isr.Lease{PK: pk, Token: "zzz"}, Now: at(11), Meta: isr.Meta{S3Key: "y", GeneratedAt: abs(11)}, Request: &isr.RequestCompletion{Key: "req-2", Hash: "h2"}})
	wantErr(t, err, isr.ErrLeaseLost)
	if r := must(tb.GetRequest(ctx, pk, "req-2"))(t); r.Status != isr.RequestStarted || r.ResultS3Key != "" {
		t.Fatalf("stale writer completed the request: %+v", r)
	}
	_ = l2
}

func must3(t *testing.T) func(isr.Request, bool, error) isr.Request {
	return func(r isr.Request, _ bool, err error) isr.Request {
		t.Helper()
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return r
	}
}

func testPublishAMonotonic(t *testing.T, tb isr.Table) {
	ctx, pk := ctxT(t), NewPK(t)
	l := acquire(t, tb, pk, "a", 0, abs(30))
	noErr(t, tb.Publish(ctx, isr.PublishInput{Lease: l, Now: at(0), Meta: isr.Meta{S3Key: "a", GeneratedAt: abs(100)}, Monotonic: true}))
	for _, g := range []int64{99, 100} {
		l = acquire(t, tb, pk, "b", 0, abs(30))
		err := tb.Publish(ctx, isr.PublishInput{Lease: l, Now: at(1), Meta: isr.Meta{S3Key: "b", GeneratedAt: abs(g)}, Monotonic: true})
		wantErr(t, err, isr.ErrNotNewer)
		if errors.Is(err, isr.ErrLeaseLost) {
			t.Fatalf("lease is valid: %v", err)
		}
		noErr(t, tb.ReleaseLease(ctx, l))
	}
	l = acquire(t, tb, pk, "c", 0, abs(30))
	noErr(t, tb.Publish(ctx, isr.PublishInput{Lease: l, Now: at(1), Meta: isr.Meta{S3Key: "c", GeneratedAt: abs(101)}, Monotonic: true}))
	if got := must(tb.GetMeta(ctx, pk))(t); got.S3Key != "c" {
		t.Fatalf("META = %+v", got)
	}
}

func testPublishB(t *testing.T, tb isr.Table) {
	ctx, pk := ctxT(t), NewPK(t)
	l := acquire(t, tb, pk, "a", 0, abs(30))
	in := isr.PublishPointerInput{
		Lease: l, Now: at(1),
		Version:           isr.Version{ID: "v1", S3Key: "pages/v1.html", GeneratedAt: abs(1), ETag: `"e1"`, TTL: abs(9999)},
		RevalidateSeconds: 60, MetaTTL: abs(9999),
	}
	m := must(tb.PublishPointer(ctx, in))(t)
	want := isr.Meta{PK: pk, S3Key: "pages/v1.html", GeneratedAt: abs(1), RevalidateSeconds: 60, ETag: `"e1"`, TTL: abs(9999), CurrentSK: "VER#v1", Version: 1}
	if m != want {
		t.Fatalf("returned META = %+v, want %+v", m, want)
	}
	if got := must(tb.GetMeta(ctx, pk))(t); got != want {
		t.Fatalf("stored META = %+v, want %+v", got, want)
	}
	v := must(tb.GetVersion(ctx, pk, "v1"))(t)
	if v != (isr.Version{PK: pk, ID: "v1", S3Key: "pages/v1.html", GeneratedAt: abs(1), ETag: `"e1"`, TTL: abs(9999)}) {
		t.Fatalf("VER = %+v", v)
	}
	_, err := tb.GetLease(ctx, pk)
	wantErr(t, err, isr.ErrNotFound)
	// Second generation: version 2, etag and ttl removed when not given.
	l = acquire(t, tb, pk, "b", 70, abs(100))
	m2 := must(tb.PublishPointer(ctx, isr.PublishPointerInput{
		Lease: l, Now: at(71), Version: isr.Version{ID: "v2", S3Key: "pages/v2.html", GeneratedAt: abs(71)},
		RevalidateSeconds: 30, ExpectedVersion: 1,
	}))(t)
	want2 := isr.Meta{PK: pk, S3Key: "pages/v2.html", GeneratedAt: abs(71), RevalidateSeconds: 30, CurrentSK: "VER#v2", Version: 2}
	if m2 != want2 {
		t.Fatalf("returned META = %+v, want %+v", m2, want2)
	}
	if got := must(tb.GetMeta(ctx, pk))(t); got != want2 {
		t.Fatalf("stored META = %+v, want %+v", got, want2)
	}
	// History kept.
	must(tb.GetVersion(ctx, pk, "v1"))(t)
}

func testPublishBGuards(t *testing.T, tb isr.Table) {
	ctx, pk := ctxT(t), NewPK(t)
	l := acquire(t, tb, pk, "a", 0, abs(30))
	base := must(tb.PublishPointer(ctx, isr.PublishPointerInput{Lease: l, Now: at(1), Version: isr.Version{ID: "v1", S3Key: "k1", GeneratedAt: abs(1)}, RevalidateSeconds: 1}))(t)

	check := func(name string, in isr.PublishPointerInput, targets ...error) {
		t.Helper()
		_, err := tb.PublishPointer(ctx, in)
		wantErr(t, err, targets...)
		wantTx(t, err)
		if got := must(tb.GetMeta(ctx, pk))(t); got != base {
			t.Fatalf("%s: refused publish changed META to %+v", name, got)
		}
		if _, err := tb.GetVersion(ctx, pk, in.Version.ID); in.Version.ID != "v1" && !errors.Is(err, isr.ErrNotFound) {
			t.Fatalf("%s: refused publish wrote VER#%s (%v)", name, in.Version.ID, err)
		}
	}
	l = acquire(t, tb, pk, "b", 10, abs(40))
	// Optimistic version: regenerated from version 0, META is at 1.
	check("version", isr.PublishPointerInput{Lease: l, Now: at(11), Version: isr.Version{ID: "v2", S3Key: "k2", GeneratedAt: abs(11)}, ExpectedVersion: 0}, isr.ErrVersionConflict)
	check("version-ahead", isr.PublishPointerInput{Lease: l, Now: at(11), Version: isr.Version{ID: "v2", S3Key: "k2", GeneratedAt: abs(11)}, ExpectedVersion: 5}, isr.ErrVersionConflict)
	// Duplicate version id.
	check("exists", isr.PublishPointerInput{Lease: l, Now: at(11), Version: isr.Version{ID: "v1", S3Key: "k2", GeneratedAt: abs(11)}, ExpectedVersion: 1}, isr.ErrVersionExists)
	// Monotonic generated_at.
	check("monotonic", isr.PublishPointerInput{Lease: l, Now: at(11), Version: isr.Version{ID: "v2", S3Key: "k2", GeneratedAt: abs(1)}, ExpectedVersion: 1, Monotonic: true}, isr.ErrNotNewer)
	// Lease lost (wrong token) together with a version conflict: both reported.
	check("lease+version", isr.PublishPointerInput{Lease: isr.Lease{PK: pk, Token: "zzz"}, Now: at(11), Version: isr.Version{ID: "v2", S3Key: "k2", GeneratedAt: abs(11)}, ExpectedVersion: 0}, isr.ErrLeaseLost, isr.ErrVersionConflict)
	// Lease expired.
	check("expired", isr.PublishPointerInput{Lease: l, Now: at(40), Version: isr.Version{ID: "v2", S3Key: "k2", GeneratedAt: abs(40)}, ExpectedVersion: 1}, isr.ErrLeaseLost)
	if must(tb.GetLease(ctx, pk))(t) != l {
		t.Fatal("refused publishes touched the lease")
	}
	// The valid publish still works.
	m := must(tb.PublishPointer(ctx, isr.PublishPointerInput{Lease: l, Now: at(12), Version: isr.Version{ID: "v2", S3Key: "k2", GeneratedAt: abs(12)}, ExpectedVersion: 1, Monotonic: true}))(t)
	if m.Version != 2 || m.CurrentSK != "VER#v2" {
		t.Fatalf("META = %+v", m)
	}
}

func testPublishBRequest(t *testing.T, tb isr.Table) {
	ctx, pk := ctxT(t), NewPK(t)
	must3(t)(tb.BeginRequest(ctx, isr.BeginRequestInput{PK: pk, Key: "q", Hash: "h", Now: at(0), TTL: abs(99)}))
	l := acquire(t, tb, pk, "a", 0, abs(30))
	_, err := tb.PublishPointer(ctx, isr.PublishPointerInput{Lease: l, Now: at(1), Version: isr.Version{ID: "v1", S3Key: "k1", GeneratedAt: abs(1)}, Request: &isr.RequestCompletion{Key: "q", Hash: "nope"}})
	wantErr(t, err, isr.ErrRequestState)
	_, err = tb.GetVersion(ctx, pk, "v1")
	wantErr(t, err, isr.ErrNotFound)
	must(tb.PublishPointer(ctx, isr.PublishPointerInput{Lease: l, Now: at(1), Version: isr.Version{ID: "v1", S3Key: "k1", GeneratedAt: abs(1)}, Request: &isr.RequestCompletion{Key: "q", Hash: "h"}}))(t)
	r := must(tb.GetRequest(ctx, pk, "q"))(t)
	if r.Status != isr.RequestCompleted || r.ResultS3Key != "k1" {
		t.Fatalf("request = %+v", r)
	}
}

func testRequests(t *testing.T, tb isr.Table) {
	ctx, pk := ctxT(t), NewPK(t)
	begin := func(key, hash string, now int64, retry bool) (isr.Request, bool, error) {
		return tb.BeginRequest(ctx, isr.BeginRequestInput{PK: pk, Key: key, Hash: hash, Now: at(now), TTL: abs(now + 100), RetryFailed: retry})
	}
	r, created, err := begin("k", "h", 0, true)
	if err != nil || !created || r.Status != isr.RequestStarted {
		t.Fatalf("first begin: %+v %v %v", r, created, err)
	}
	// Same key, same hash: the stored item, not created.
	r, created, err = begin("k", "h", 1, true)
	if err != nil || created || r.Status != isr.RequestStarted || r.TTL != abs(100) {
		t.Fatalf("replayed begin: %+v %v %v", r, created, err)
	}
	// Same key, different hash: fail closed, whatever the status.
	_, _, err = begin("k", "other", 1, true)
	wantErr(t, err, isr.ErrRequestMismatch)
	var re *isr.RequestError
	if !errors.As(err, &re) || re.Request.Hash != "h" || re.Request.Status != isr.RequestStarted {
		t.Fatalf("want *RequestError with the stored item, got %v", err)
	}
	// Fail: wrong hash refused; right hash -> FAILED.
	wantErr(t, tb.FailRequest(ctx, pk, "k", "other"), isr.ErrRequestState)
	noErr(t, tb.FailRequest(ctx, pk, "k", "h"))
	wantErr(t, tb.FailRequest(ctx, pk, "k", "h"), isr.ErrRequestState)
	if r := must(tb.GetRequest(ctx, pk, "k"))(t); r.Status != isr.RequestFailed {
		t.Fatalf("after fail: %+v", r)
	}
	_, _, err = begin("k", "other", 2, true)
	wantErr(t, err, isr.ErrRequestMismatch)
	// FAILED without retry: returned as is.
	r, created, err = begin("k", "h", 2, false)
	if err != nil || created || r.Status != isr.RequestFailed {
		t.Fatalf("begin on FAILED without retry: %+v %v %v", r, created, err)
	}
	// FAILED with retry: taken again.
	r, created, err = begin("k", "h", 3, true)
	if err != nil || !created || r.Status != isr.RequestStarted || r.TTL != abs(103) {
		t.Fatalf("begin on FAILED with retry: %+v %v %v", r, created, err)
	}
	// Past its ttl the item counts as absent (even with another hash).
	r, created, err = begin("k", "new", 103, false)
	if err != nil || !created || r.Hash != "new" {
		t.Fatalf("begin after ttl: %+v %v %v", r, created, err)
	}
	// Abandon: only STARTED with the same hash.
	wantErr(t, tb.AbandonRequest(ctx, pk, "k", "h"), isr.ErrRequestState)
	noErr(t, tb.AbandonRequest(ctx, pk, "k", "new"))
	_, err = tb.GetRequest(ctx, pk, "k")
	wantErr(t, err, isr.ErrNotFound)
	wantErr(t, tb.AbandonRequest(ctx, pk, "k", "new"), isr.ErrRequestState)
	wantErr(t, tb.FailRequest(ctx, pk, "missing", "h"), isr.ErrRequestState)
	// Concurrent begins: exactly one creates.
	var wg sync.WaitGroup
	var createdN atomic.Int32
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, c, err := begin("race", "h", 0, true)
			if err != nil && !errors.Is(err, isr.ErrConflict) {
				t.Error(err)
			}
			if c {
				createdN.Add(1)
			}
		}()
	}
	wg.Wait()
	if createdN.Load() != 1 {
		t.Fatalf("%d concurrent begins created the request", createdN.Load())
	}
}

func testInvalid(t *testing.T, tb isr.Table) {
	ctx, pk := ctxT(t), NewPK(t)
	l := isr.Lease{PK: pk, Token: "t"}
	errs := []error{
		func() error { _, err := tb.GetMeta(ctx, ""); return err }(),
		func() error { _, err := tb.GetRequest(ctx, pk, ""); return err }(),
		func() error { _, err := tb.GetVersion(ctx, pk, "bad\nid"); return err }(),
		tb.ReleaseLease(ctx, isr.Lease{PK: pk}),
		tb.Publish(ctx, isr.PublishInput{Lease: l, Now: at(0), Meta: isr.Meta{}}),
		tb.Publish(ctx, isr.PublishInput{Lease: l, Now: at(0), Meta: isr.Meta{PK: "CACHE#other", S3Key: "x"}}),
		tb.Publish(ctx, isr.PublishInput{Lease: l, Now: at(0), Meta: isr.Meta{S3Key: "x", RevalidateSeconds: -1}}),
		tb.Publish(ctx, isr.PublishInput{Lease: l, Now: at(0), Meta: isr.Meta{S3Key: "x"}, Request: &isr.RequestCompletion{Key: "k"}}),
		func() error {
			_, err := tb.PublishPointer(ctx, isr.PublishPointerInput{Lease: l, Now: at(0), Version: isr.Version{S3Key: "x"}})
			return err
		}(),
		func() error {
			_, _, err := tb.BeginRequest(ctx, isr.BeginRequestInput{PK: pk, Key: "k", Hash: "h", Now: at(0), TTL: abs(0)})
			return err
		}(),
		func() error {
			_, _, err := tb.BeginRequest(ctx, isr.BeginRequestInput{PK: pk, Key: "k", Now: at(0), TTL: abs(10)})
			return err
		}(),
		tb.FailRequest(ctx, pk, "", "h"),
		tb.AbandonRequest(ctx, pk, "k", ""),
	}
	for i, err := range errs {
		if !errors.Is(err, isr.ErrInvalidInput) {
			t.Errorf("case %d: want ErrInvalidInput, got %v", i, err)
		}
	}
}

// testPublishBPrevious: a recipe-B publish naming the row META points to
// (Previous) gives that row PreviousTTL and requires META to still point
// there; the new row keeps its own ttl.
func testPublishBPrevious(t *testing.T, tb isr.Table) {
	ctx, pk := ctxT(t), NewPK(t)
	l := acquire(t, tb, pk, "a", 0, abs(30))
	base := must(tb.PublishPointer(ctx, isr.PublishPointerInput{Lease: l, Now: at(1), Version: isr.Version{ID: "v1", S3Key: "k1", GeneratedAt: abs(1)}, RevalidateSeconds: 1}))(t)
	l = acquire(t, tb, pk, "b", 10, abs(40))
	v2 := isr.Version{ID: "v2", S3Key: "k2", GeneratedAt: abs(11)}
	// META points to VER#v1, not VER#v0: refused, nothing written.
	_, err := tb.PublishPointer(ctx, isr.PublishPointerInput{Lease: l, Now: at(11), Version: v2, ExpectedVersion: 1, Previous: "VER#v0", PreviousTTL: abs(500)})
	wantErr(t, err, isr.ErrVersionConflict)
	wantTx(t, err)
	if got := must(tb.GetMeta(ctx, pk))(t); got != base {
		t.Fatalf("refused publish changed META to %+v", got)
	}
	if v := must(tb.GetVersion(ctx, pk, "v1"))(t); v.TTL != 0 {
		t.Fatalf("refused publish gave VER#v1 ttl %d", v.TTL)
	}
	// Invalid: not a VER# sort key, or no ttl for it.
	for _, in := range []isr.PublishPointerInput{
		{Lease: l, Now: at(11), Version: v2, ExpectedVersion: 1, Previous: "META", PreviousTTL: abs(500)},
		{Lease: l, Now: at(11), Version: v2, ExpectedVersion: 1, Previous: "VER#v1"},
	} {
		_, err := tb.PublishPointer(ctx, in)
		wantErr(t, err, isr.ErrInvalidInput)
	}
	m := must(tb.PublishPointer(ctx, isr.PublishPointerInput{Lease: l, Now: at(11), Version: v2, ExpectedVersion: 1, Previous: "VER#v1", PreviousTTL: abs(500)}))(t)
	if m.CurrentSK != "VER#v2" || m.Version != 2 {
		t.Fatalf("META = %+v", m)
	}
	if v := must(tb.GetVersion(ctx, pk, "v1"))(t); v.TTL != abs(500) || v.S3Key != "k1" {
		t.Fatalf("superseded VER#v1 = %+v, want ttl %d and its attributes kept", v, abs(500))
	}
	if v := must(tb.GetVersion(ctx, pk, "v2"))(t); v.TTL != 0 {
		t.Fatalf("current VER#v2 = %+v, want no ttl", v)
	}
	if got := must(tb.GetMeta(ctx, pk))(t); got.S3Key != "k2" {
		t.Fatalf("stored META = %+v", got)
	}
}
