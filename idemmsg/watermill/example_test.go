package watermill_test

import (
	"context"
	"time"

	"github.com/idem-go/idem/storekit"

	wm "github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemmsg"
	"github.com/idem-go/idem/idemmsg/watermill"
)

// ExampleMiddleware puts the middleware on a router in place of
// Watermill's in-memory deduplicator.
func ExampleMiddleware() {
	var (
		store storekit.Store     // any idem store shared by the consumers
		sub   message.Subscriber // e.g. watermill-amqp or watermill-nats
	)
	d, err := idemmsg.New(store, idemmsg.WithGuard(idem.WithTakeoverAfter(20*time.Second)))
	if err != nil {
		return
	}
	router, err := message.NewRouter(message.RouterConfig{}, wm.NopLogger{})
	if err != nil {
		return
	}
	router.AddMiddleware(watermill.Middleware(d))
	router.AddConsumerHandler("billing", "orders", sub, func(msg *message.Message) error {
		return nil // charge(msg.Context(), msg.Payload)
	})
	_ = router.Run(context.Background())
}
