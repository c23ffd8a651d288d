package main

import (
	"context"
	"errors"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/memstore"
)

// The handler as Lambda calls it, twice with one order and once with the
// same ID and another amount: one charge, the same receipt, a refusal.
func TestHandlerChargesOnce(t *testing.T) {
	store, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	h, err := newHandler(store)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	o := Order{OrderID: "o-1", Amount: 1200, Currency: "EUR"}
	first, err := h(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	again, err := h(ctx, o)
	if err != nil || again != first || charges.Load() != 1 {
		t.Fatalf("repeat = %+v, %v after %d charges; want %+v after 1", again, err, charges.Load(), first)
	}
	o.Amount = 1300
	if _, err := h(ctx, o); !errors.Is(err, idem.ErrPayloadMismatch) {
		t.Fatalf("other amount: %v, want ErrPayloadMismatch", err)
	}
}
