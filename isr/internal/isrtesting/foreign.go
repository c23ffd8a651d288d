package isrtesting

import (
	"context"
	"errors"
	"reflect"
	"strconv"
	"testing"
	"time"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/isrtest"
)

// RawN is a number attribute as another service writes it: DynamoDB's
// decimal text.
type RawN string

// RawTable is a Table together with direct access to its stored items, in
// the DynamoDB attribute names: values are strings or RawN.
type RawTable struct {
	Table isr.Table
	// PointerGuard: the acquire guard reads the generated_at of the VER#
	// row META points to (Redis and files; a DynamoDB condition cannot).
	PointerGuard bool
	// Put writes an item as another service would; Raw reads one back.
	Put func(t *testing.T, pk, sk string, item map[string]any)
	Raw func(t *testing.T, pk, sk string) map[string]any
}

// NumberAttrs are the schema's number attributes.
var NumberAttrs = map[string]bool{"generated_at": true, "revalidate_seconds": true, "ttl": true, "version": true, "lease_expires_at": true}

// RunForeignItems: items written the way other services write them (the
// seeds' recipes, numbers with fractions or exponents, wrong types) are
// read as on DynamoDB, and the items isr writes carry exactly the schema's
// attribute names and value types.
func RunForeignItems(t *testing.T, r RawTable) {
	ctx := context.Background()
	// A quarter past a whole second: numbers are compared with the exact
	// instant, so a fraction above .25 is later than now and one at or
	// below it is not.
	now := time.Unix(time.Now().Unix(), 250e6)
	f := foreignItems{r: r, tb: r.Table, now: now, unix: now.Unix()}
	for _, c := range []struct {
		name string
		run  func(context.Context, *testing.T)
	}{
		{"pointer-only META follows current_sk", f.pointerOnlyMeta},
		{"pointer-only META without revalidate_seconds takes the coordinator's default", f.pointerOnlyMetaDefaultRevalidate},
		{"pointer swapped over a recipe-A META serves the pointed version", f.pointerOverRecipeA},
		{"pointer to a missing row is corrupt", f.pointerToMissingRow},
		{"lease_expires_at that is not a number is corrupt, never held until 0", f.leaseExpiresNotNumber},
		{"fractional lease_expires_at: GetLease and acquire agree", f.fractionalLeaseExpires},
		{"every number text gets one answer from GetLease and acquire", f.everyNumberText},
		{"fractions and exponents decide freshness and the META guard exactly", f.fractionsDecideFreshness},
		{"a stale META with a fractional generated_at is regenerated", f.staleFractionalGeneratedAt},
		{"ttl of another type decides nothing", f.foreignTTL},
		{"items isr writes have the schema's names and types", f.writtenItems},
	} {
		t.Run(c.name, func(t *testing.T) { c.run(ctx, t) })
	}
}

// foreignItems is the table under test and the instant RunForeignItems'
// checks take as now.
type foreignItems struct {
	r    RawTable
	tb   isr.Table
	now  time.Time
	unix int64 // now in whole seconds
}

// rawInt is v as a number attribute.
func rawInt(v int64) RawN { return RawN(strconv.FormatInt(v, 10)) }

// pointerOnlyMeta reads a META that only points to a VER# row as that row.
func (f foreignItems) pointerOnlyMeta(ctx context.Context, t *testing.T) {
	pk := isrtest.NewPK(t)
	f.r.Put(t, pk, "VER#v7", map[string]any{"pk": pk, "sk": "VER#v7", "s3_key": "pages/v7", "generated_at": rawInt(f.unix), "etag": `"e7"`, "revalidate_seconds": RawN("60")})
	f.r.Put(t, pk, "META", map[string]any{"pk": pk, "sk": "META", "current_sk": "VER#v7"})
	m, err := f.tb.GetMeta(ctx, pk)
	if err != nil || m.S3Key != "pages/v7" || m.ETag != `"e7"` || m.GeneratedAt != f.unix || m.RevalidateSeconds != 60 || m.CurrentSK != "VER#v7" {
		t.Fatalf("GetMeta = %+v, %v", m, err)
	}
}

// pointerOnlyMetaDefaultRevalidate reads a pointer-only META without
// revalidate_seconds as missing it, which the coordinator fills with its
// default; a recipe-A META without it is corrupt.
func (f foreignItems) pointerOnlyMetaDefaultRevalidate(ctx context.Context, t *testing.T) {
	// META = {current_sk, version} only, as a recipe-B writer starting
	// from scratch writes it; the VER# row has no revalidate_seconds
	// either.
	pk := isrtest.NewPK(t)
	f.r.Put(t, pk, "VER#v1", map[string]any{"pk": pk, "sk": "VER#v1", "s3_key": "pages/v1", "generated_at": rawInt(f.unix - 30), "etag": `"e1"`})
	f.r.Put(t, pk, "META", map[string]any{"pk": pk, "sk": "META", "current_sk": "VER#v1", "version": RawN("1")})
	m, err := f.tb.GetMeta(ctx, pk)
	if err != nil || m.S3Key != "pages/v1" || m.GeneratedAt != f.unix-30 || m.RevalidateSeconds != 0 || !m.RevalidateMissing || m.Version != 1 {
		t.Fatalf("GetMeta = %+v, %v", m, err)
	}
	clock := func() time.Time { return f.now }
	c := MustCoordinator(t, f.tb, isr.WithClock(clock), isr.WithDefaultRevalidate(time.Minute))
	m, err = c.Lookup(ctx, pk)
	if err != nil || m.RevalidateSeconds != 60 || !m.RevalidateMissing || !m.Fresh(f.now) || m.Fresh(f.now.Add(31*time.Second)) {
		t.Fatalf("Lookup = %+v, %v", m, err)
	}
	res, err := c.Regenerate(ctx, pk, nil, func(context.Context, isr.Lease) (isr.Page, error) {
		return isr.Page{}, errors.New("must not render: fresh by the default window")
	})
	if err != nil || res.Outcome != isr.OutcomeFresh {
		t.Fatalf("Regenerate = %+v, %v", res, err)
	}
	// Past the default window it is stale and regenerated over the
	// pointer, version continuing.
	later := MustCoordinator(t, f.tb, isr.WithClock(func() time.Time { return f.now.Add(time.Minute) }), isr.WithDefaultRevalidate(time.Minute), isr.WithPointerSwap())
	res, err = later.Regenerate(ctx, pk, nil, func(context.Context, isr.Lease) (isr.Page, error) {
		return isr.Page{S3Key: "pages/v2", RevalidateSeconds: 30, VersionID: "v2"}, nil
	})
	if err != nil || res.Outcome != isr.OutcomeRegenerated || res.Meta.Version != 2 {
		t.Fatalf("Regenerate when stale = %+v, %v", res, err)
	}
	if m, err := f.tb.GetMeta(ctx, pk); err != nil || m.RevalidateMissing || m.RevalidateSeconds != 30 || m.CurrentSK != "VER#v2" {
		t.Fatalf("GetMeta after Go's publish = %+v, %v", m, err)
	}

	// The VER# row's revalidate_seconds wins over the default.
	pk2 := isrtest.NewPK(t)
	f.r.Put(t, pk2, "VER#v1", map[string]any{"pk": pk2, "sk": "VER#v1", "s3_key": "pages/v1", "generated_at": rawInt(f.unix), "revalidate_seconds": RawN("5")})
	f.r.Put(t, pk2, "META", map[string]any{"pk": pk2, "sk": "META", "current_sk": "VER#v1", "version": RawN("1")})
	if m, err := c.Lookup(ctx, pk2); err != nil || m.RevalidateSeconds != 5 || m.RevalidateMissing {
		t.Fatalf("Lookup with the VER# row's revalidate_seconds = %+v, %v", m, err)
	}

	// A recipe-A META (no pointer) without revalidate_seconds is still
	// corrupt.
	pk3 := isrtest.NewPK(t)
	f.r.Put(t, pk3, "META", map[string]any{"pk": pk3, "sk": "META", "s3_key": "p", "generated_at": rawInt(f.unix)})
	if _, err := c.Lookup(ctx, pk3); !errors.Is(err, isr.ErrCorruptItem) {
		t.Fatalf("Lookup of a recipe-A META without revalidate_seconds = %v, want ErrCorruptItem", err)
	}
}

// pointerOverRecipeA serves the pointed version of a recipe-A META a
// pointer was swapped over, and acquires over it.
func (f foreignItems) pointerOverRecipeA(ctx context.Context, t *testing.T) {
	pk := isrtest.NewPK(t)
	f.r.Put(t, pk, "META", map[string]any{"pk": pk, "sk": "META", "s3_key": "pages/old", "generated_at": RawN("1000"), "etag": `"old"`, "revalidate_seconds": RawN("60"), "current_sk": "VER#v2"})
	f.r.Put(t, pk, "VER#v2", map[string]any{"pk": pk, "sk": "VER#v2", "s3_key": "pages/v2", "generated_at": rawInt(f.unix)})
	m, err := f.tb.GetMeta(ctx, pk)
	if err != nil || m.S3Key != "pages/v2" || m.ETag != "" || m.GeneratedAt != f.unix || m.RevalidateSeconds != 60 {
		t.Fatalf("GetMeta = %+v, %v", m, err)
	}
	// The acquire guard conditions on the generated_at the reader saw
	// (the VER# row's), so the fresh-looking old META does not block it.
	c := MustCoordinator(t, f.tb, isr.WithClock(func() time.Time { return f.now.Add(2 * time.Minute) }))
	res, err := c.Regenerate(ctx, pk, nil, func(context.Context, isr.Lease) (isr.Page, error) {
		return isr.Page{S3Key: "pages/v3", RevalidateSeconds: 60}, nil
	})
	if err != nil || res.Outcome != isr.OutcomeRegenerated {
		t.Fatalf("Regenerate = %+v, %v", res, err)
	}
}

// pointerToMissingRow finds a META pointing to no row corrupt.
func (f foreignItems) pointerToMissingRow(ctx context.Context, t *testing.T) {
	pk := isrtest.NewPK(t)
	f.r.Put(t, pk, "META", map[string]any{"pk": pk, "sk": "META", "current_sk": "VER#gone"})
	if _, err := f.tb.GetMeta(ctx, pk); !errors.Is(err, isr.ErrCorruptItem) {
		t.Fatalf("GetMeta = %v, want ErrCorruptItem", err)
	}
	seen := int64(0)
	_, err := f.tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "t", Now: f.now, ExpiresAt: f.unix + 30, TTL: f.unix + 90, IfMetaNotNewer: &seen})
	if f.r.PointerGuard && !errors.Is(err, isr.ErrCorruptItem) {
		t.Fatalf("guarded AcquireLease = %v, want ErrCorruptItem", err)
	}
}

// leaseExpiresNotNumber finds a LOCK whose lease_expires_at is no number
// corrupt, never held until 0.
func (f foreignItems) leaseExpiresNotNumber(ctx context.Context, t *testing.T) {
	for _, bad := range []any{"soon", RawN("0x10"), RawN("1e"), RawN("")} {
		pk := isrtest.NewPK(t)
		f.r.Put(t, pk, "LOCK", map[string]any{"pk": pk, "sk": "LOCK", "lease_token": "x", "lease_expires_at": bad, "ttl": RawN("1")})
		_, err := f.tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "t", Now: f.now, ExpiresAt: f.unix + 30, TTL: f.unix + 90})
		if !errors.Is(err, isr.ErrCorruptItem) || errors.Is(err, isr.ErrLeaseHeld) {
			t.Fatalf("%q: AcquireLease = %v, want ErrCorruptItem", bad, err)
		}
		if _, err := f.tb.GetLease(ctx, pk); !errors.Is(err, isr.ErrCorruptItem) {
			t.Fatalf("%q: GetLease = %v, want ErrCorruptItem", bad, err)
		}
	}
}

// fractionalLeaseExpires checks that GetLease and AcquireLease agree on
// fractional lease_expires_at values either side of now.
func (f foreignItems) fractionalLeaseExpires(ctx context.Context, t *testing.T) {
	for _, c := range []struct {
		exp  string
		held bool
	}{
		{strconv.FormatInt(f.unix, 10) + ".5", true}, {strconv.FormatInt(f.unix, 10) + ".2", false},
		{strconv.FormatInt(f.unix, 10) + ".25", false}, {strconv.FormatInt(f.unix, 10) + ".2500000001", true},
		{strconv.FormatInt(f.unix, 10) + ".25e0", false}, {strconv.FormatInt(f.unix, 10)[:1] + "." + strconv.FormatInt(f.unix, 10)[1:] + "3e9", true},
		{strconv.FormatInt(f.unix, 10), false}, {strconv.FormatInt(f.unix+1, 10) + ".5", true}, {"1.7e9", false},
	} {
		pk := isrtest.NewPK(t)
		f.r.Put(t, pk, "LOCK", map[string]any{"pk": pk, "sk": "LOCK", "lease_token": "x", "lease_expires_at": RawN(c.exp)})
		l, err := f.tb.GetLease(ctx, pk)
		if err != nil || l.Held(f.now) != c.held {
			t.Fatalf("%s: GetLease = %+v, %v; held want %v", c.exp, l, err, c.held)
		}
		_, err = f.tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "t", Now: f.now, ExpiresAt: f.unix + 30, TTL: f.unix + 90})
		if c.held != errors.Is(err, isr.ErrLeaseHeld) || (!c.held && err != nil) {
			t.Fatalf("%s: AcquireLease = %v, held want %v", c.exp, err, c.held)
		}
	}
}

// everyNumberText checks that GetLease and AcquireLease give the same
// answer for every kind of number text, valid or not.
func (f foreignItems) everyNumberText(ctx context.Context, t *testing.T) {
	u := strconv.FormatInt(f.unix, 10)
	u1 := strconv.FormatInt(f.unix+1, 10)
	for _, v := range []string{
		"1", "1.", ".5", "-0", "-1", "1e3", "1E+3", "1.5e-3", u, u + ".0", u + ".999", u1, u1 + ".0", u1 + "e0",
		u[:1] + "." + u[1:] + "e9", "9e18", "9.5e18", "1e400", "1e", "0x10", " 1", "1 ", "+1", "1_0", "inf", "NaN", "", "-", ".", "e5",
	} {
		pk := isrtest.NewPK(t)
		f.r.Put(t, pk, "LOCK", map[string]any{"pk": pk, "sk": "LOCK", "lease_token": "x", "lease_expires_at": RawN(v)})
		l, gerr := f.tb.GetLease(ctx, pk)
		_, aerr := f.tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "t", Now: f.now, ExpiresAt: f.unix + 30, TTL: f.unix + 90})
		switch {
		case errors.Is(gerr, isr.ErrCorruptItem):
			if !errors.Is(aerr, isr.ErrCorruptItem) {
				t.Errorf("%q: GetLease %v, but AcquireLease %v", v, gerr, aerr)
			}
		case gerr != nil:
			t.Errorf("%q: GetLease %v", v, gerr)
		case l.Held(f.now) != errors.Is(aerr, isr.ErrLeaseHeld) || (!l.Held(f.now) && aerr != nil):
			t.Errorf("%q: GetLease says held %v (expires %d), AcquireLease %v", v, l.Held(f.now), l.ExpiresAt, aerr)
		}
	}
}

// fractionsDecideFreshness checks that fractional and exponent generated_at
// and revalidate_seconds decide freshness, and the META guard, exactly.
func (f foreignItems) fractionsDecideFreshness(ctx context.Context, t *testing.T) {
	u := strconv.FormatInt(f.unix-60, 10)
	for _, c := range []struct {
		gen, reval string
		fresh      bool
	}{
		{u + ".3", "60", true}, {u + ".2", "60", false}, {u + ".25", "60", false}, {u, "60.26", true},
		{u[:1] + "." + u[1:] + "3e9", "6e1", true}, {u[:1] + "." + u[1:] + "2e9", "6.0e1", false},
		{u, "60", false}, {strconv.FormatInt(f.unix-59, 10), "60", true},
	} {
		pk := isrtest.NewPK(t)
		f.r.Put(t, pk, "META", map[string]any{"pk": pk, "sk": "META", "s3_key": "p", "generated_at": RawN(c.gen), "revalidate_seconds": RawN(c.reval)})
		m, err := f.tb.GetMeta(ctx, pk)
		if err != nil {
			t.Fatalf("%s + %s: GetMeta: %v", c.gen, c.reval, err)
		}
		if m.Fresh(f.now) != c.fresh {
			t.Errorf("%s + %s: Fresh(%s) = %v, want %v (Meta %+v)", c.gen, c.reval, f.now.Format(time.RFC3339Nano), m.Fresh(f.now), c.fresh, m)
		}
		if stale := m.StaleAt(); stale.After(f.now) != c.fresh {
			t.Errorf("%s + %s: StaleAt %s, fresh %v", c.gen, c.reval, stale, c.fresh)
		}
		// The generated_at read is the value conditioned on: an acquire
		// guarded with it succeeds; one guarded with a value just
		// below it (the floored seconds) finds META changed.
		if m.GeneratedAtN != "" {
			floor := m.GeneratedAt
			_, err := f.tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "lo", Now: f.now, ExpiresAt: f.unix + 30, TTL: f.unix + 90, IfMetaNotNewer: &floor})
			if !errors.Is(err, isr.ErrMetaChanged) {
				t.Errorf("%s: acquire guarded with the floor %d = %v, want ErrMetaChanged", c.gen, floor, err)
			}
		}
		g := m.GeneratedAt
		l, err := f.tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "t", Now: f.now, ExpiresAt: f.unix + 30, TTL: f.unix + 90, IfMetaNotNewer: &g, IfMetaNotNewerN: m.GeneratedAtN})
		if err != nil {
			t.Errorf("%s: acquire guarded with the value read = %v", c.gen, err)
		} else if err := f.tb.ReleaseLease(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
}

// staleFractionalGeneratedAt regenerates a stale META whose generated_at
// has a fraction.
func (f foreignItems) staleFractionalGeneratedAt(ctx context.Context, t *testing.T) {
	pk := isrtest.NewPK(t)
	f.r.Put(t, pk, "META", map[string]any{"pk": pk, "sk": "META", "s3_key": "old", "generated_at": RawN(strconv.FormatInt(f.unix-100, 10) + ".7"), "revalidate_seconds": RawN("60")})
	c := MustCoordinator(t, f.tb, isr.WithClock(func() time.Time { return f.now }))
	res, err := c.Regenerate(ctx, pk, nil, func(context.Context, isr.Lease) (isr.Page, error) {
		return isr.Page{S3Key: "new", RevalidateSeconds: 60}, nil
	})
	if err != nil || res.Outcome != isr.OutcomeRegenerated {
		t.Fatalf("Regenerate = %+v, %v", res, err)
	}
	if m, err := f.tb.GetMeta(ctx, pk); err != nil || m.S3Key != "new" {
		t.Fatalf("GetMeta = %+v, %v", m, err)
	}
}

// foreignTTL reads a META whose ttl is of another type as having none.
func (f foreignItems) foreignTTL(ctx context.Context, t *testing.T) {
	pk := isrtest.NewPK(t)
	f.r.Put(t, pk, "META", map[string]any{"pk": pk, "sk": "META", "s3_key": "p", "generated_at": rawInt(f.unix), "revalidate_seconds": RawN("60"), "ttl": "soon"})
	if m, err := f.tb.GetMeta(ctx, pk); err != nil || m.S3Key != "p" || m.TTL != 0 {
		t.Fatalf("GetMeta = %+v, %v", m, err)
	}
}

// writtenItems checks the items isr writes (LOCK, META, REQ#, VER#, the
// pointer META) attribute by attribute.
func (f foreignItems) writtenItems(ctx context.Context, t *testing.T) {
	pk := isrtest.NewPK(t)
	_, _, err := f.tb.BeginRequest(ctx, isr.BeginRequestInput{PK: pk, Key: "q", Hash: "h", Now: f.now, TTL: f.unix + 100})
	if err != nil {
		t.Fatal(err)
	}
	l, err := f.tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "tok", Now: f.now, ExpiresAt: f.unix + 30, TTL: f.unix + 90})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"pk": pk, "sk": "LOCK", "lease_token": "tok", "lease_expires_at": rawInt(f.unix + 30), "ttl": rawInt(f.unix + 90)}
	if got := f.r.Raw(t, pk, "LOCK"); !reflect.DeepEqual(got, want) {
		t.Fatalf("LOCK = %v, want %v", got, want)
	}
	err = f.tb.Publish(ctx, isr.PublishInput{Lease: l, Now: f.now, Meta: isr.Meta{S3Key: "a&<b>", GeneratedAt: f.unix, RevalidateSeconds: 60, ETag: `"e"`}, Request: &isr.RequestCompletion{Key: "q", Hash: "h"}})
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]any{"pk": pk, "sk": "META", "s3_key": "a&<b>", "generated_at": rawInt(f.unix), "revalidate_seconds": RawN("60"), "etag": `"e"`}
	if got := f.r.Raw(t, pk, "META"); !reflect.DeepEqual(got, want) {
		t.Fatalf("META = %v, want %v", got, want)
	}
	want = map[string]any{"pk": pk, "sk": "REQ#q", "request_hash": "h", "status": "COMPLETED", "result_s3_key": "a&<b>", "ttl": rawInt(f.unix + 100)}
	if got := f.r.Raw(t, pk, "REQ#q"); !reflect.DeepEqual(got, want) {
		t.Fatalf("REQ# = %v, want %v", got, want)
	}
	l, err = f.tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "tok2", Now: f.now, ExpiresAt: f.unix + 30, TTL: f.unix + 90})
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.tb.PublishPointer(ctx, isr.PublishPointerInput{Lease: l, Now: f.now, Version: isr.Version{ID: "v1", S3Key: "b", GeneratedAt: f.unix + 1, ETag: `"v"`}, RevalidateSeconds: 30, MetaTTL: f.unix + 999})
	if err != nil {
		t.Fatal(err)
	}
	want = map[string]any{"pk": pk, "sk": "VER#v1", "s3_key": "b", "generated_at": rawInt(f.unix + 1), "etag": `"v"`}
	if got := f.r.Raw(t, pk, "VER#v1"); !reflect.DeepEqual(got, want) {
		t.Fatalf("VER# = %v, want %v", got, want)
	}
	want = map[string]any{"pk": pk, "sk": "META", "s3_key": "b", "generated_at": rawInt(f.unix + 1), "revalidate_seconds": RawN("30"), "etag": `"v"`, "ttl": rawInt(f.unix + 999), "current_sk": "VER#v1", "version": RawN("1")}
	if got := f.r.Raw(t, pk, "META"); !reflect.DeepEqual(got, want) {
		t.Fatalf("META = %v, want %v", got, want)
	}
}
