package natsstore_test

import (
	"context"
	"fmt"
	"os"

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
