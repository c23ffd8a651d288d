package natsstore_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/natsstore"
)

// Example guards a charge with a Guard on a JetStream KV bucket replicated
// three ways (on a single server, leave WithReplicas out).
func Example() {
	url := os.Getenv("IDEM_NATS_URL")
	if url == "" {
		url = nats.DefaultURL
	}
	nc, err := nats.Connect(url)
	if err != nil {
		fmt.Println("connect:", err)
		return
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	kv, err := natsstore.CreateBucket(ctx, js, "idem_example")
	if err != nil {
		fmt.Println("bucket:", err)
		return
	}
	defer func() { _ = js.DeleteKeyValue(ctx, "idem_example") }()
	store, err := natsstore.New(kv)
	if err != nil {
		fmt.Println("store:", err)
		return
	}
	g, err := idem.New[string](store, idem.OnDuplicate(idem.Wait))
	if err != nil {
		fmt.Println("guard:", err)
		return
	}
	for range 2 {
		id, err := g.Do(ctx, "order-1001", func(ctx context.Context) (string, error) {
			fmt.Println("charging")
			return "ch_1", nil
		})
		fmt.Println(id, err)
	}
	// Output:
	// charging
	// ch_1 <nil>
	// ch_1 <nil>
}

// ExampleWithMaxAge makes a bucket that the server expires: 25h covers the
// default 24h TTL and the store's one-minute retention. A Guard whose
// records would outlive it is refused before fn runs.
func ExampleWithMaxAge() {
	url := os.Getenv("IDEM_NATS_URL")
	if url == "" {
		url = nats.DefaultURL
	}
	nc, err := nats.Connect(url)
	if err != nil {
		fmt.Println("connect:", err)
		return
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	kv, err := natsstore.CreateBucket(ctx, js, "idem_example_maxage", natsstore.WithMaxAge(25*time.Hour))
	if err != nil {
		fmt.Println("bucket:", err)
		return
	}
	defer func() { _ = js.DeleteKeyValue(ctx, "idem_example_maxage") }()
	store, err := natsstore.New(kv) // no clean-up pass runs: the server expires entries
	if err != nil {
		fmt.Println("store:", err)
		return
	}
	defer func() { _ = store.Close() }()
	fn := func(context.Context) (string, error) { return "ch_1", nil }

	g, _ := idem.New[string](store) // TTL 24h
	fmt.Println(g.Do(ctx, "order-1001", fn))

	long, _ := idem.New[string](store, idem.WithTTL(48*time.Hour))
	_, err = long.Do(ctx, "order-1002", fn)
	var mae *natsstore.MaxAgeError
	fmt.Println(errors.Is(err, storekit.ErrInvalidOption), errors.As(err, &mae) && mae.MaxAge == 25*time.Hour)
	// Output:
	// ch_1 <nil>
	// true true
}

// ExampleWithCleanup removes expired records about every minute while the
// store is open, instead of the default five; Close stops it.
func ExampleWithCleanup() {
	url := os.Getenv("IDEM_NATS_URL")
	if url == "" {
		url = nats.DefaultURL
	}
	nc, err := nats.Connect(url)
	if err != nil {
		fmt.Println("connect:", err)
		return
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	kv, err := natsstore.CreateBucket(ctx, js, "idem_example_cleanup")
	if err != nil {
		fmt.Println("bucket:", err)
		return
	}
	defer func() { _ = js.DeleteKeyValue(ctx, "idem_example_cleanup") }()
	store, err := natsstore.New(kv, natsstore.WithCleanup(time.Minute))
	if err != nil {
		fmt.Println("store:", err)
		return
	}
	g, _ := idem.New[string](store)
	fmt.Println(g.Do(ctx, "order-1001", func(context.Context) (string, error) { return "ch_1", nil }))
	fmt.Println(store.Close())
	// Output:
	// ch_1 <nil>
	// <nil>
}
