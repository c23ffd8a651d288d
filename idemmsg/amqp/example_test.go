package amqp_test

import (
	"context"
	"time"

	"github.com/idem-go/idem/storekit"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemmsg"
	"github.com/idem-go/idem/idemmsg/amqp"
)

func charge(context.Context, []byte) error { return nil }

// ExampleHandle consumes a queue with manual acknowledgements; every
// delivery carries a MessageId set by its publisher.
func ExampleHandle() {
	var store storekit.Store // any idem store shared by the consumers
	d, err := idemmsg.New(store, idemmsg.WithGuard(idem.WithTakeoverAfter(20*time.Second)))
	if err != nil {
		return
	}
	conn, err := amqp091.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		return
	}
	defer conn.Close()
	ch, _ := conn.Channel()
	_ = ch.Qos(8, 0, false)
	deliveries, err := ch.Consume("orders", "", false, false, false, false, nil)
	if err != nil {
		return
	}
	ctx := context.Background()
	for del := range deliveries {
		amqp.Handle(ctx, d, del, func(ctx context.Context, del amqp091.Delivery) error {
			return charge(ctx, del.Body)
		})
	}
}
