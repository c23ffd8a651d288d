// Package isrtesting holds what the tests of the isr modules (isr,
// isr/dynamoisr, isr/redisisr) share beyond the conformance suite
// isrtest: the runs every table that keeps items in the schema goes
// through (items other services wrote, a lease that lapses, the server's
// removal of expired items, several processes on one table) and the
// fixtures they are built from. It is not API.
package isrtesting

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/body"
)

// MustCoordinator is isr.NewCoordinator, failing the test on an error.
func MustCoordinator(t testing.TB, tb isr.Table, opts ...isr.Option) *isr.Coordinator {
	t.Helper()
	c, err := isr.NewCoordinator(tb, opts...)
	if err != nil {
		t.Fatalf("NewCoordinator: %v", err)
	}
	return c
}

// MustHandler is isr.NewHandler, failing the test on an error.
func MustHandler(t testing.TB, c *isr.Coordinator, bodies body.Store, render isr.PageFunc, opts ...isr.HandlerOption) *isr.Handler {
	t.Helper()
	h, err := isr.NewHandler(c, bodies, render, opts...)
	if err != nil {
		t.Fatalf("NewHandler: %v", err)
	}
	return h
}

// MustPK is isr.PK of key without a tenant, failing the test on an error.
func MustPK(t testing.TB, key string) string {
	t.Helper()
	pk, err := isr.PK("", key)
	if err != nil {
		t.Fatal(err)
	}
	return pk
}

// Response is what a handler answered.
type Response struct {
	Code  int
	Hdr   http.Header
	Body  string
	Cache string // the X-Isr-Cache header
}

// Get is Do with GET.
func Get(h http.Handler, path string, hdr ...string) Response {
	return Do(h, http.MethodGet, path, hdr...)
}

// Do sends h a request of method for path with the headers hdr (name,
// value, ...) and returns its answer.
func Do(h http.Handler, method, path string, hdr ...string) Response {
	r := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	res := w.Result()
	b, _ := io.ReadAll(res.Body)
	return Response{Code: res.StatusCode, Hdr: res.Header, Body: string(b), Cache: res.Header.Get(isr.HeaderCache)}
}

// SeedStale publishes a META that is already stale.
func SeedStale(t *testing.T, tb isr.Table, pk string) isr.Meta {
	t.Helper()
	ctx := context.Background()
	past := time.Now().Add(-time.Hour)
	l, err := tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "seed", Now: past, ExpiresAt: past.Unix() + 30, TTL: past.Unix() + 60})
	if err != nil {
		t.Fatal(err)
	}
	m := isr.Meta{PK: pk, S3Key: "old", GeneratedAt: past.Unix(), RevalidateSeconds: 60, ETag: `"old"`}
	if err := tb.Publish(ctx, isr.PublishInput{Lease: l, Now: past, Meta: m}); err != nil {
		t.Fatal(err)
	}
	return m
}

// Render is a RenderFunc that renders the page "body" at once.
func Render(context.Context, isr.Lease) (isr.Page, error) {
	return isr.Page{S3Key: "body", ETag: `"e"`, RevalidateSeconds: 60}, nil
}

// MustAcquire takes the lease of pk, failing the test when it cannot.
func MustAcquire(tb testing.TB, c *isr.Coordinator, pk string) isr.Lease {
	tb.Helper()
	l, err := c.TryAcquire(context.Background(), pk, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return l
}

// SeedPage publishes a page for pk that is stale at once.
func SeedPage(tb testing.TB, c *isr.Coordinator, pk string) {
	tb.Helper()
	if _, err := c.Publish(context.Background(), MustAcquire(tb, c, pk), isr.Page{S3Key: "seed", RevalidateSeconds: 0}); err != nil {
		tb.Fatal(err)
	}
}

// BenchFresh measures fresh hits of h on the page "/bench", which it
// renders first.
func BenchFresh(b *testing.B, h *isr.Handler) {
	if r := Get(h, "/bench"); r.Code != 200 {
		b.Fatalf("seed: %+v", r)
	}
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		req := httptest.NewRequest(http.MethodGet, "/bench", nil)
		for pb.Next() {
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code != 200 {
				b.Fatalf("status %d", w.Code)
			}
		}
	})
}
