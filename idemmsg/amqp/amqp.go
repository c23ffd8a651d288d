// Package amqp guards RabbitMQ (AMQP 0-9-1) deliveries with an
// idemmsg.Dedup: each message key's handler runs at most once across every
// consumer, and the delivery is acknowledged only once its outcome is
// recorded.
//
//	d, _ := idemmsg.New(store, idemmsg.WithGuard(idem.WithTakeoverAfter(10*time.Second)))
//	deliveries, _ := ch.Consume(queue, "", false, false, false, false, nil) // manual acks
//	for del := range deliveries {
//		amqp.Handle(ctx, d, del, func(ctx context.Context, del amqp091.Delivery) error {
//			return charge(ctx, del.Body)
//		})
//	}
//
// The key is the delivery's MessageId property; a delivery without one is
// rejected (it could never be deduplicated) unless WithKey names another.
// What Handle decides is answered with Ack (done, or done before),
// Nack with requeue (the handler failed, the store failed, or the same key
// runs in another consumer: then after the busy delay, so a redelivery
// does not spin), or Reject without requeue (the same key with another
// body; a failure recorded under idem.OnFailure(idem.Lock); no key).
// Consume with manual acknowledgements (autoAck false).
//
// RabbitMQ redelivers an unacknowledged delivery when its channel or
// connection closes, and (with the consumer timeout) when it is held too
// long; the Guard's heartbeat keeps the claim alive meanwhile, so such a
// redelivery to another consumer is retried later, never run twice.
package amqp

import (
	"context"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	"github.com/idem-go/idem/idemmsg"
	"github.com/idem-go/idem/storekit"
)

// Option configures Handle.
type Option func(*config)

type config struct {
	key func(amqp091.Delivery) (string, error)
}

// WithKey replaces the default key (the MessageId property). A key
// function that fails, or returns "", rejects the delivery.
func WithKey(key func(amqp091.Delivery) (string, error)) Option {
	return func(c *config) {
		if key != nil {
			c.key = key
		}
	}
}

// Key returns the default key of del: its MessageId property, or an error
// matching idem.ErrInvalidKey when it has none.
func Key(del amqp091.Delivery) (string, error) {
	if del.MessageId == "" {
		return "", &storekit.KeyError{Reason: "delivery has no message-id property"}
	}
	return del.MessageId, nil
}

// Handle runs h for del through d, answers the delivery (Ack, Nack with
// requeue, or Reject), and returns what was decided. A Retry with a delay
// waits for it (or for ctx) before the Nack, holding this consumer's
// goroutine; give the channel a prefetch (Qos) above one to keep others
// flowing meanwhile.
func Handle(ctx context.Context, d *idemmsg.Dedup, del amqp091.Delivery, h func(context.Context, amqp091.Delivery) error, opts ...Option) idemmsg.Result {
	c := config{key: Key}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	var r idemmsg.Result
	key, err := c.key(del)
	if err == nil && key == "" {
		err = &storekit.KeyError{Reason: "empty message key"}
	}
	if err != nil {
		r = idemmsg.Result{Action: idemmsg.Reject, Err: err}
	} else {
		r = d.Handle(ctx, key, del.Body, func(ctx context.Context) error { return h(ctx, del) })
	}
	answer(ctx, del, r)
	return r
}

// answer tells the broker what was decided. A lost answer is a
// redelivery, which the Dedup answers again.
func answer(ctx context.Context, del amqp091.Delivery, r idemmsg.Result) {
	switch r.Action {
	case idemmsg.Ack:
		_ = del.Ack(false)
	case idemmsg.Reject:
		_ = del.Reject(false)
	default:
		if r.Delay > 0 {
			t := time.NewTimer(r.Delay)
			select {
			case <-t.C:
			case <-ctx.Done():
			}
			t.Stop()
		}
		_ = del.Nack(false, true)
	}
}
