package isr_test

import (
	"context"
	"testing"
	"time"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/internal/isrtesting"
	"github.com/idem-go/idem/isr/isrtest"
)

// BenchmarkMemoryRegeneration measures a regeneration (Lookup, TryAcquire,
// Publish) on the memory table, and fails if acquire + publish is not 2
// requests.
func BenchmarkMemoryRegeneration(b *testing.B) {
	tbl := newMemoryTable(b)
	c := mustCoordinator(b, tbl)
	pk := isrtest.NewPK(b)
	isrtesting.SeedPage(b, c, pk)
	ctx := context.Background()
	before := tbl.Requests()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		seen, _ := c.Lookup(ctx, pk)
		l, err := c.TryAcquire(ctx, pk, &seen)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Publish(ctx, l, isr.Page{S3Key: "body", RevalidateSeconds: 0, GeneratedAt: time.Unix(seen.GeneratedAt+1, 0)}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	perRegen := float64(tbl.Requests()-before)/float64(b.N) - 1
	b.ReportMetric(perRegen, "requests/regen")
	if perRegen != 2 {
		b.Fatalf("acquire + publish = %.2f requests, want 2", perRegen)
	}
}
