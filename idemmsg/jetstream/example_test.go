package jetstream_test

import (
	"context"
	"time"

	"github.com/idem-go/idem/storekit"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemmsg"
	"github.com/idem-go/idem/idemmsg/jetstream"
)

func charge(context.Context, []byte) error { return nil }

// ExampleHandler consumes a durable pull consumer whose AckWait is 30s:
// InProgress every 10s keeps a long handler's message from being
// redelivered meanwhile, and a redelivery after a crash runs the handler
// once the dead consumer's claim is 20s stale.
func ExampleHandler() {
	var (
		store storekit.Store  // any idem store shared by the consumers
		cons  natsjs.Consumer // js.CreateOrUpdateConsumer(ctx, "ORDERS", natsjs.ConsumerConfig{Durable: "billing", AckPolicy: natsjs.AckExplicitPolicy})
	)
	d, err := idemmsg.New(store, idemmsg.WithGuard(idem.WithTakeoverAfter(20*time.Second)))
	if err != nil {
		return
	}
	cc, err := cons.Consume(jetstream.Handler(d, func(ctx context.Context, msg natsjs.Msg) error {
		return charge(ctx, msg.Data())
	}, jetstream.WithInProgress(10*time.Second)))
	if err != nil {
		return
	}
	defer cc.Stop()
}
