package dynamoisr_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/internal/isrtesting"
	"github.com/idem-go/idem/isr/isrtest"
)

// regenerationCosts measures, with SDK middleware, the DynamoDB requests of
// one regeneration in each shape.
func regenerationCosts(tb testing.TB, c *isr.Coordinator, rc *requestCounter, pk string, i int) (manual, flow, withReq int64) {
	ctx := context.Background()
	// Manual: the handler already has META (it is serving it stale).
	seen, err := c.Lookup(ctx, pk)
	if err != nil {
		tb.Fatal(err)
	}
	before := rc.total.Load()
	l, err := c.TryAcquire(ctx, pk, &seen)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := c.Publish(ctx, l, isr.Page{S3Key: "body", ETag: `"e"`, RevalidateSeconds: 0}); err != nil {
		tb.Fatal(err)
	}
	manual = rc.total.Load() - before

	// Regenerate without a request record: META read + acquire + publish.
	before = rc.total.Load()
	res, err := c.Regenerate(ctx, pk, nil, render0)
	if err != nil || res.Outcome != isr.OutcomeRegenerated {
		tb.Fatalf("%+v %v", res, err)
	}
	flow = rc.total.Load() - before

	// Regenerate with a request record: + REQ# create.
	if _, err := c.Publish(ctx, isrtesting.MustAcquire(tb, c, pk), isr.Page{S3Key: "stale", RevalidateSeconds: 0}); err != nil {
		tb.Fatal(err)
	}
	before = rc.total.Load()
	res, err = c.Regenerate(ctx, pk, &isr.RequestSpec{Key: fmt.Sprintf("req-%d", i), Hash: "h"}, render0)
	if err != nil || res.Outcome != isr.OutcomeRegenerated {
		tb.Fatalf("%+v %v", res, err)
	}
	withReq = rc.total.Load() - before
	return
}

func render0(context.Context, isr.Lease) (isr.Page, error) {
	return isr.Page{S3Key: "body", ETag: `"e"`, RevalidateSeconds: 0}, nil
}

// TestDynamoRequestsPerRegeneration pins the request counts: acquire +
// publish = 2; Regenerate = 3 (META read first); with a request record = 4.
func TestDynamoRequestsPerRegeneration(t *testing.T) {
	client, rc := dynamoClient(t)
	c := mustCoordinator(t, mustDynamoTable(t, client, freshTable(t, client)))
	pk := isrtest.NewPK(t)
	isrtesting.SeedPage(t, c, pk)
	manual, flow, withReq := regenerationCosts(t, c, rc, pk, 0)
	if manual != 2 || flow != 3 || withReq != 4 {
		t.Fatalf("requests: acquire+publish %d (want 2), Regenerate %d (want 3), with REQ# %d (want 4)", manual, flow, withReq)
	}
	// A fresh page costs one read and nothing else.
	if _, err := c.Publish(context.Background(), isrtesting.MustAcquire(t, c, pk), isr.Page{S3Key: "fresh", RevalidateSeconds: 3600}); err != nil {
		t.Fatal(err)
	}
	before := rc.total.Load()
	res, err := c.Regenerate(context.Background(), pk, nil, isrtesting.Render)
	if err != nil || res.Outcome != isr.OutcomeFresh || rc.total.Load()-before != 1 {
		t.Fatalf("fresh: %+v %v, %d requests", res, err, rc.total.Load()-before)
	}
}

// BenchmarkDynamoRegeneration reports store requests per regeneration,
// counted by SDK middleware, and fails if acquire + publish is not 2.
func BenchmarkDynamoRegeneration(b *testing.B) {
	client, rc := dynamoClient(b)
	c := mustCoordinator(b, mustDynamoTable(b, client, freshTable(b, client)))
	pk := isrtest.NewPK(b)
	isrtesting.SeedPage(b, c, pk)
	ctx := context.Background()
	before := rc.total.Load()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		seen, err := c.Lookup(ctx, pk)
		if err != nil {
			b.Fatal(err)
		}
		l, err := c.TryAcquire(ctx, pk, &seen)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Publish(ctx, l, isr.Page{S3Key: "body", ETag: `"e"`, RevalidateSeconds: 0, GeneratedAt: time.Unix(seen.GeneratedAt+1, 0)}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	perRegen := float64(rc.total.Load()-before)/float64(b.N) - 1 // minus the Lookup
	b.ReportMetric(perRegen, "requests/regen")
	if perRegen != 2 {
		b.Fatalf("acquire + publish = %.2f requests, want 2", perRegen)
	}
}
