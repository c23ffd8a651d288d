package isrtest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idem-go/idem/isr"
)

// Lifecycle is a table under RunLifecycle, with the hooks that suite
// needs.
type Lifecycle struct {
	// Table is the table, judging expiry on the suite's clock (the
	// *Clock passed to the constructor), as isr.WithTableClock sets it.
	Table isr.Table
	// Collect removes what the table's clean-up removes at the clock's
	// reading (a FileTable's or MemoryTable's Purge).
	Collect func(ctx context.Context) error
	// Count is how many items the table holds, expired or not.
	Count func(t *testing.T) int
}

// RunLifecycle runs the lifecycle suite: what a table holds stays bounded
// under a steady load of crashed leases, abandoned requests and
// publications of both recipes, once expired items are collected; nothing
// live is ever collected; and collecting an expired LOCK never lets its
// stale holder publish.
func RunLifecycle(t *testing.T, newTable func(t *testing.T, clock *Clock) Lifecycle) {
	t.Run("Plateau", func(t *testing.T) { testPlateau(t, newTable) })
	t.Run("KeepsLive", func(t *testing.T) { testKeepsLive(t, newTable) })
	t.Run("StaleHolder", func(t *testing.T) { testStaleHolder(t, newTable) })
}

// testPlateau: each round leaves a LOCK on fresh cache keys (workers that
// crashed), STARTED REQ# items (requests never finished), COMPLETED REQ#
// items, and a new VER# row per recipe-B publication of a few pages; every
// item but the pages' META and current VER# expires within the round.
// After each round's collection the table holds the same number of items.
func testPlateau(t *testing.T, newTable func(*testing.T, *Clock) Lifecycle) {
	const (
		rounds  = 12
		crashed = 40 // leases and requests left behind per round
		pages   = 4  // pages published each round, recipe A and B each
	)
	ctx, clock := ctxT(t), NewClock(Base())
	lc := newTable(t, clock)
	opts := []isr.Option{isr.WithLeaseDuration(time.Second), isr.WithTTLBuffer(time.Second), isr.WithRequestTTL(time.Second)}
	coordA := newCoord(t, lc.Table, clock, opts...)
	coordB := newCoord(t, lc.Table, clock, append(opts, isr.WithPointerSwap())...)
	pksA, pksB := make([]string, pages), make([]string, pages)
	for i := range pages {
		pksA[i], pksB[i] = NewPK(t), NewPK(t)
	}
	var r counter
	var counts []int
	for round := range rounds {
		for range crashed {
			_ = must(coordA.TryAcquire(ctx, NewPK(t), nil))(t) // never released
			pk := NewPK(t)
			now := clock.Now()
			_, _, err := lc.Table.BeginRequest(ctx, isr.BeginRequestInput{PK: pk, Key: "abandoned", Hash: "h", Now: now, TTL: now.Unix() + 1})
			noErr(t, err)
		}
		for i := range pages {
			req := &isr.RequestSpec{Key: fmt.Sprintf("r%d", round), Hash: "h"}
			expect(t, isr.OutcomeRegenerated)(coordA.Regenerate(ctx, pksA[i], req, r.render))
			expect(t, isr.OutcomeRegenerated)(coordB.Regenerate(ctx, pksB[i], req, r.render))
		}
		// Past every ttl written this round (lease 1s + buffer 1s, request
		// 1s, a superseded VER# publish time + buffer), and past the pages'
		// freshness (60s) so the next round regenerates them.
		clock.Advance(2 * time.Minute)
		noErr(t, lc.Collect(ctx))
		counts = append(counts, lc.Count(t))
	}
	// What stays: each page's META, and recipe B's current VER# row.
	if want := 3 * pages; counts[len(counts)-1] != want {
		t.Fatalf("items after each round's collection: %v; want %d (META of %d pages, current VER# of %d)", counts, want, 2*pages, pages)
	}
	for _, c := range counts {
		if c != 3*pages {
			t.Fatalf("items after each round's collection: %v; want %d throughout", counts, 3*pages)
		}
	}
	// The pages still serve.
	for _, pk := range append(pksA, pksB...) {
		m := must(coordA.Lookup(ctx, pk))(t)
		if m.S3Key == "" {
			t.Fatalf("META of %s lost: %+v", pk, m)
		}
	}
}

// testKeepsLive: a collection keeps a held LOCK, a REQ# item before its
// ttl, META and VER# without ttl; it removes a LOCK whose ttl passed only
// once the lease has expired.
func testKeepsLive(t *testing.T, newTable func(*testing.T, *Clock) Lifecycle) {
	ctx, clock := ctxT(t), NewClock(Base())
	lc := newTable(t, clock)
	tb := lc.Table
	pk := NewPK(t)
	// A lease whose ttl is its expiry (the least the schema allows).
	l := must(tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "a", Now: at(0), ExpiresAt: abs(10), TTL: abs(10)}))(t)
	_, _, err := tb.BeginRequest(ctx, isr.BeginRequestInput{PK: pk, Key: "k", Hash: "h", Now: at(0), TTL: abs(10)})
	noErr(t, err)
	clock.Set(at(9))
	noErr(t, lc.Collect(ctx))
	if _, err := tb.GetLease(ctx, pk); err != nil {
		t.Fatalf("held LOCK collected: %v", err)
	}
	if _, err := tb.GetRequest(ctx, pk, "k"); err != nil {
		t.Fatalf("REQ# before its ttl collected: %v", err)
	}
	// Published (no ttl): META stays for good.
	l = must(tb.RefreshLease(ctx, isr.RefreshInput{Lease: l, Now: at(9), ExpiresAt: abs(20), TTL: abs(20)}))(t)
	noErr(t, tb.Publish(ctx, isr.PublishInput{Lease: l, Now: at(9), Meta: isr.Meta{S3Key: "s", GeneratedAt: abs(9), RevalidateSeconds: 1}}))
	clock.Set(at(10))
	noErr(t, lc.Collect(ctx))
	if _, err := tb.GetRequest(ctx, pk, "k"); !errors.Is(err, isr.ErrNotFound) {
		t.Fatalf("REQ# past its ttl: %v, want it collected", err)
	}
	clock.Set(at(1_000_000))
	noErr(t, lc.Collect(ctx))
	if _, err := tb.GetMeta(ctx, pk); err != nil {
		t.Fatalf("META without ttl collected: %v", err)
	}
}

// testStaleHolder: a worker whose lease expired and was collected cannot
// refresh or publish, before or after another worker acquires the lease.
func testStaleHolder(t *testing.T, newTable func(*testing.T, *Clock) Lifecycle) {
	ctx, clock := ctxT(t), NewClock(Base())
	lc := newTable(t, clock)
	tb := lc.Table
	pk := NewPK(t)
	old := must(tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "old", Now: at(0), ExpiresAt: abs(10), TTL: abs(11)}))(t)
	clock.Set(at(11))
	noErr(t, lc.Collect(ctx))
	if _, err := tb.GetLease(ctx, pk); !errors.Is(err, isr.ErrNotFound) {
		t.Fatalf("LOCK past its ttl and expiry: %v, want it collected", err)
	}
	page := isr.Meta{S3Key: "old", GeneratedAt: abs(11), RevalidateSeconds: 1}
	wantErr(t, tb.Publish(ctx, isr.PublishInput{Lease: old, Now: at(5), Meta: page}), isr.ErrLeaseLost)
	_, err := tb.RefreshLease(ctx, isr.RefreshInput{Lease: old, Now: at(5), ExpiresAt: abs(20), TTL: abs(21)})
	wantErr(t, err, isr.ErrLeaseLost)
	_, err = tb.PublishPointer(ctx, isr.PublishPointerInput{Lease: old, Now: at(5), Version: isr.Version{ID: "v-old", S3Key: "old", GeneratedAt: abs(11)}})
	wantErr(t, err, isr.ErrLeaseLost)
	// Another worker takes the lease; the old holder still cannot publish.
	_ = must(tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "new", Now: at(12), ExpiresAt: abs(40), TTL: abs(41)}))(t)
	wantErr(t, tb.Publish(ctx, isr.PublishInput{Lease: old, Now: at(5), Meta: page}), isr.ErrLeaseLost)
	noErr(t, lc.Collect(ctx))
	if l := must(tb.GetLease(ctx, pk))(t); l.Token != "new" {
		t.Fatalf("LOCK = %+v, want the new holder's", l)
	}
	if _, err := tb.GetMeta(ctx, pk); !errors.Is(err, isr.ErrNotFound) {
		t.Fatalf("META = %v, want none: the stale holder published", err)
	}
}
