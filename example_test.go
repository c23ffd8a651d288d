package idem_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/memstore"
)

type Invoice struct {
	ID     string
	Amount int
}

func Example() {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	g, err := idem.New[Invoice](store, idem.WithTTL(24*time.Hour))
	if err != nil {
		panic(err)
	}
	charges := 0
	charge := func(ctx context.Context) (Invoice, error) {
		charges++
		return Invoice{ID: "inv_1", Amount: 1999}, nil
	}
	ctx := context.Background()
	first, _ := g.Do(ctx, "order-7", charge)
	retry, _ := g.Do(ctx, "order-7", charge)
	fmt.Println(first.ID, retry.ID, "charges:", charges)
	// Output: inv_1 inv_1 charges: 1
}

func ExampleKey() {
	k1, _ := idem.Key("create_invoice", map[string]any{"user": 42, "amount": 1999})
	k2, _ := idem.Key("create_invoice", map[string]any{"amount": 1999, "user": 42})
	fmt.Println(k1 == k2)
	_, err := idem.Key("create_invoice", func() {})
	fmt.Println(errors.Is(err, idem.ErrInvalidKey))
	// Output:
	// true
	// true
}

func ExampleWrap() {
	store, _ := memstore.New() // no options: cannot fail
	g, _ := idem.New[string](store)
	type Refund struct {
		Order  string
		Amount int
	}
	refund := idem.Wrap(g, "refund", func(ctx context.Context, r Refund) (string, error) {
		fmt.Println("refunding", r.Order)
		return "re_" + r.Order, nil
	})
	a, _ := refund(context.Background(), Refund{"o1", 500})
	b, _ := refund(context.Background(), Refund{"o1", 500})
	fmt.Println(a, b)
	// Output:
	// refunding o1
	// re_o1 re_o1
}

func ExamplePayload() {
	store, _ := memstore.New() // no options: cannot fail
	g, _ := idem.New[int](store)
	ctx := context.Background()
	one := func(ctx context.Context) (int, error) { return 1, nil }
	_, _ = g.Do(ctx, "k", one, idem.Payload(map[string]int{"amount": 100}))
	_, err := g.Do(ctx, "k", one, idem.Payload(map[string]int{"amount": 200}))
	fmt.Println(errors.Is(err, idem.ErrPayloadMismatch))
	// Output: true
}

func ExampleOnFailure() {
	store, _ := memstore.New() // no options: cannot fail
	g, _ := idem.New[int](store, idem.OnFailure(idem.Lock))
	ctx := context.Background()
	fail := func(ctx context.Context) (int, error) { return 0, errors.New("card declined") }
	_, err := g.Do(ctx, "k", fail)
	fmt.Println(err)
	_, err = g.Do(ctx, "k", fail)
	var stored *idem.RecordedFailure
	fmt.Println(errors.Is(err, idem.ErrPreviousFailure), errors.As(err, &stored), stored.Message)
	// Output:
	// card declined
	// true true card declined
}

func ExampleOnDuplicate() {
	store, _ := memstore.New() // no options: cannot fail
	g, _ := idem.New[string](store, idem.OnDuplicate(idem.Raise))
	ctx := context.Background()
	fn := func(ctx context.Context) (string, error) { return "done", nil }
	_, _ = g.Do(ctx, "k", fn)
	_, err := g.Do(ctx, "k", fn)
	fmt.Println(errors.Is(err, idem.ErrDuplicate))
	// Output: true
}

func ExampleFencingToken() {
	store, _ := memstore.New() // no options: cannot fail
	g, _ := idem.New[int64](store)
	tok, _ := g.Do(context.Background(), "k", func(ctx context.Context) (int64, error) {
		t, _ := idem.FencingToken(ctx)
		return t, nil // pass t to a system that rejects tokens going backwards
	})
	fmt.Println(tok)
	// Output: 1
}

func ExampleWithSanitize() {
	type Payment struct {
		ID        string
		CardToken string
	}
	store, _ := memstore.New() // no options: cannot fail
	g, _ := idem.New[Payment](store,
		idem.WithSanitize(func(p Payment) Payment { p.CardToken = ""; return p }))
	ctx := context.Background()
	pay := func(ctx context.Context) (Payment, error) { return Payment{"pay_1", "tok_visa"}, nil }
	first, _ := g.Do(ctx, "k", pay)
	replay, _ := g.Do(ctx, "k", pay)
	fmt.Printf("%+v\n%+v\n", first, replay)
	// Output:
	// {ID:pay_1 CardToken:tok_visa}
	// {ID:pay_1 CardToken:}
}
