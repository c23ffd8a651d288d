package isr_test

import (
	"context"
	"fmt"
	"time"

	"github.com/idem-go/idem/isr"
)

// A server looks a page up, serves it if fresh, and otherwise lets exactly
// one worker regenerate it; everyone else serves the stale copy at once.
func Example() {
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	table, err := isr.NewMemoryTable()
	if err != nil {
		panic(err)
	}
	defer table.Close()
	c, err := isr.NewCoordinator(table, isr.WithClock(func() time.Time { return now }))
	if err != nil {
		panic(err)
	}

	pk, _ := isr.PK("acme", "/blog/hello")
	render := func(ctx context.Context, lease isr.Lease) (isr.Page, error) {
		// Render the page, write the body to the body store, then:
		return isr.Page{S3Key: "acme/blog/hello.html", ETag: `"v1"`, RevalidateSeconds: 60}, nil
	}

	res, _ := c.Regenerate(ctx, pk, nil, render)
	fmt.Println(res.Outcome, res.Meta.S3Key)

	res, _ = c.Regenerate(ctx, pk, nil, render)
	fmt.Println(res.Outcome)

	// A queue-triggered regeneration, idempotent per message id.
	now = now.Add(2 * time.Minute)
	key, _ := isr.MessageIDKey("059f36b4-87a3-44ab-83d2-661975830a7d")
	req := &isr.RequestSpec{Key: key, Hash: isr.RequestHash("acme", "/blog/hello")}
	res, _ = c.Regenerate(ctx, pk, req, render)
	fmt.Println(res.Outcome)
	now = now.Add(2 * time.Minute)
	res, _ = c.Regenerate(ctx, pk, req, render) // the message is redelivered
	fmt.Println(res.Outcome, res.ResultS3Key)
	// Output:
	// regenerated acme/blog/hello.html
	// fresh
	// regenerated
	// recorded acme/blog/hello.html
}

// A lease left by a worker that crashed is removed once its ttl
// (lease_expires_at + the TTL buffer) has passed. The clean-up goroutine
// does this by itself about every minute; here WithoutCleanup leaves it
// to Purge, and WithTableClock moves time on.
func ExampleMemoryTable_Purge() {
	ctx := context.Background()
	now := time.Unix(1_700_000_000, 0)
	table, err := isr.NewMemoryTable(isr.WithTableClock(func() time.Time { return now }), isr.WithoutCleanup())
	if err != nil {
		panic(err)
	}
	defer table.Close()

	pk, _ := isr.PK("acme", "/blog/hello")
	exp := now.Unix() + 30
	if _, err := table.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "worker-1", Now: now, ExpiresAt: exp, TTL: exp + 3600}); err != nil {
		panic(err)
	}
	fmt.Println("items:", table.Len())

	now = now.Add(2 * time.Hour)
	removed, err := table.Purge(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("removed:", removed, "items:", table.Len())
	// Output:
	// items: 1
	// removed: 1 items: 0
}
