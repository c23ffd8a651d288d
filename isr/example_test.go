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
