package isrtesting

import (
	"context"
	"testing"
	"time"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/isrtest"
)

// ServerLoad is one round of what leaves garbage in a table: leases of
// crashed workers on fresh cache keys, requests begun and never finished,
// and one publication of each page (pagesA with recipe A, pagesB with
// recipe B, each superseding a VER# row). It returns the cache keys it
// left a LOCK or REQ# on.
func ServerLoad(t *testing.T, tb isr.Table, clock func() time.Time, pagesA, pagesB []string, crashed int) []string {
	t.Helper()
	ctx := context.Background()
	opts := []isr.Option{isr.WithClock(clock), isr.WithLeaseDuration(time.Second), isr.WithTTLBuffer(time.Second), isr.WithRequestTTL(time.Second)}
	coordA := MustCoordinator(t, tb, opts...)
	coordB := MustCoordinator(t, tb, append(opts, isr.WithPointerSwap())...)
	var left []string
	for range crashed {
		pk := isrtest.NewPK(t)
		if _, err := coordA.TryAcquire(ctx, pk, nil); err != nil {
			t.Fatal(err)
		}
		now := clock()
		if _, _, err := tb.BeginRequest(ctx, isr.BeginRequestInput{PK: pk, Key: "abandoned", Hash: "h", Now: now, TTL: now.Unix() + 1}); err != nil {
			t.Fatal(err)
		}
		left = append(left, pk)
	}
	publish := func(c *isr.Coordinator, pk string) {
		l, err := c.TryAcquire(ctx, pk, nil)
		if err != nil {
			t.Fatal(err)
		}
		page := isr.Page{S3Key: "pages/" + pk, RevalidateSeconds: 60}
		if m, err := c.Lookup(ctx, pk); err == nil {
			page.BaseVersion, page.BaseSK = m.Version, m.CurrentSK
		}
		if _, err := c.Publish(ctx, l, page); err != nil {
			t.Fatal(err)
		}
	}
	for _, pk := range pagesA {
		publish(coordA, pk)
	}
	for _, pk := range pagesB {
		publish(coordB, pk)
	}
	return left
}

// NewPKs returns n new cache keys.
func NewPKs(t *testing.T, n int) []string {
	pks := make([]string, n)
	for i := range pks {
		pks[i] = isrtest.NewPK(t)
	}
	return pks
}
