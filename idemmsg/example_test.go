package idemmsg_test

import (
	"context"
	"fmt"

	"github.com/idem-go/idem/idemmsg"
	"github.com/idem-go/idem/stores/memstore"
)

// Example shows the decisions for a message, its redelivery, and a
// redelivery whose body changed.
func Example() {
	store, _ := memstore.New()
	d, _ := idemmsg.New(store)
	ctx := context.Background()
	charge := func(context.Context) error { fmt.Println("charging order 1001"); return nil }

	fmt.Println(d.Handle(ctx, "order-1001", []byte(`{"amount":10}`), charge).Action)
	fmt.Println(d.Handle(ctx, "order-1001", []byte(`{"amount":10}`), charge).Action)
	fmt.Println(d.Handle(ctx, "order-1001", []byte(`{"amount":99}`), charge).Action)
	// Output:
	// charging order 1001
	// ack
	// ack
	// reject
}
