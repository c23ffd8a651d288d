package idem_test

import (
	"context"
	"fmt"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/memstore"
)

// A call recorded under the old secret is replayed after the rotation's
// second deploy, WithSecret(new, old), instead of running again.
func ExampleWithSecret() {
	store, err := memstore.New()
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	oldSecret, newSecret := []byte("old secret, 32 bytes of random"), []byte("new secret, 32 bytes of random")

	before, _ := idem.New[string](store, idem.WithSecret(oldSecret))
	v, _ := before.Do(ctx, "order-42", func(context.Context) (string, error) { return "charged once", nil })
	fmt.Println(v)

	after, _ := idem.New[string](store, idem.WithSecret(newSecret, oldSecret))
	v, _ = after.Do(ctx, "order-42", func(context.Context) (string, error) { return "charged twice", nil })
	fmt.Println(v)
	// Output:
	// charged once
	// charged once
}
