// Command invoice shows idem keeping a payment from being charged twice.
//
// Two "servers" (two Guards, sharing nothing but a file-store directory)
// receive many concurrent retries of the same charge request, as a flaky
// network and an impatient client would send them. The card is charged once;
// every retry gets the same invoice; a retry with a different amount under
// the same idempotency key is refused.
//
//	go run ./examples/invoice            # a fresh temporary directory
//	go run ./examples/invoice -dir ./data # keep the records between runs
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/filestore"
)

// Invoice is what the charge returns and what replays get back.
type Invoice struct {
	ID     string `json:"id"`
	Amount int    `json:"amount_cents"`
	Card   string `json:"card,omitempty"` // never stored: see WithSanitize
}

// ChargeRequest is the payload that must match on a replay.
type ChargeRequest struct {
	Customer string `json:"customer"`
	Amount   int    `json:"amount_cents"`
}

func main() {
	dir := flag.String("dir", "", "file store directory (default: a new temporary directory)")
	retries := flag.Int("retries", 32, "concurrent retries of the charge")
	flag.Parse()
	if err := run(*dir, *retries); err != nil {
		log.Fatal(err)
	}
}

func run(dir string, retries int) error {
	if dir == "" {
		tmp, err := os.MkdirTemp("", "idem-invoice-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	store, err := filestore.New(dir)
	if err != nil {
		return err
	}
	var charges atomic.Int32
	charge := func(ctx context.Context, req ChargeRequest) (Invoice, error) {
		n := charges.Add(1)
		time.Sleep(50 * time.Millisecond) // the payment provider is slow
		tok, _ := idem.FencingToken(ctx)
		return Invoice{ID: fmt.Sprintf("inv_%s_%d", req.Customer, tok), Amount: req.Amount, Card: fmt.Sprintf("card-charge-%d", n)}, nil
	}
	newServer := func() (*idem.Guard[Invoice], error) {
		return idem.New[Invoice](store,
			idem.WithNamespace("shop", "invoices.create"),
			idem.OnDuplicate(idem.Wait), // retries wait for the first attempt's outcome
			idem.WithSanitize(func(inv Invoice) Invoice { inv.Card = ""; return inv }),
		)
	}
	a, err := newServer()
	if err != nil {
		return err
	}
	b, err := newServer()
	if err != nil {
		return err
	}

	const key = "order-1234" // the client's Idempotency-Key header
	req := ChargeRequest{Customer: "cus_42", Amount: 1999}
	fmt.Printf("%d retries of one charge arrive at two servers at once (store: %s)\n", retries, dir)
	ctx := context.Background()
	var wg sync.WaitGroup
	ids := make([]string, retries)
	errs := make([]error, retries)
	for i := 0; i < retries; i++ {
		g := a
		if i%2 == 1 {
			g = b
		}
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			inv, err := g.Do(ctx, key, func(ctx context.Context) (Invoice, error) { return charge(ctx, req) }, idem.Payload(req))
			ids[i], errs[i] = inv.ID, err
		}(i)
	}
	wg.Wait()
	distinct := map[string]int{}
	for i := range ids {
		if errs[i] != nil {
			return fmt.Errorf("retry %d: %w", i, errs[i])
		}
		distinct[ids[i]]++
	}
	fmt.Printf("the card was charged %d time(s); all %d callers got invoice(s) %v\n", charges.Load(), retries, distinct)

	inv, err := a.Do(ctx, key, func(ctx context.Context) (Invoice, error) { return charge(ctx, req) }, idem.Payload(req))
	if err != nil {
		return err
	}
	fmt.Printf("a later retry is a replay: invoice %s for %d cents, card detail not stored (%q); charges still %d\n",
		inv.ID, inv.Amount, inv.Card, charges.Load())

	other := ChargeRequest{Customer: "cus_42", Amount: 2999}
	_, err = b.Do(ctx, key, func(ctx context.Context) (Invoice, error) { return charge(ctx, other) }, idem.Payload(other))
	fmt.Printf("the same key with a different amount is refused: %v (payload mismatch: %v)\n", err, errors.Is(err, idem.ErrPayloadMismatch))
	if charges.Load() != 1 {
		return fmt.Errorf("charged %d times", charges.Load())
	}
	fmt.Println("exactly one charge")
	return nil
}
