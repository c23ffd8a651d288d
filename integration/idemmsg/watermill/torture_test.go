package watermill_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	wm "github.com/ThreeDotsLabs/watermill"
	wmamqp "github.com/ThreeDotsLabs/watermill-amqp/v3/pkg/amqp"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/idemmsg"
	"github.com/idem-go/idem/idemmsg/watermill"
	"github.com/idem-go/idem/integration/idemmsg/internal/torture"
	"github.com/idem-go/idem/internal/testenv"
)

var errDropped = errors.New("ack dropped")

// dropAcks nacks the first delivery of some messages after their handler
// succeeded, as a consumer whose ack is lost: the message comes back.
func dropAcks(env torture.Env) message.HandlerMiddleware {
	var mu sync.Mutex
	seen := map[string]bool{}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, err := h(msg)
			mu.Lock()
			first := !seen[msg.UUID]
			seen[msg.UUID] = true
			mu.Unlock()
			if err == nil && first && env.DropAck() {
				return nil, errDropped
			}
			return out, err
		}
	}
}

func tortureConfig(t *testing.T, guarded bool) torture.Config {
	url := testenv.AMQPURL(t)
	logger := wm.NopLogger{}
	return torture.Config{
		Guarded: guarded,
		Setup: func(t *testing.T, ns string, msgs []torture.Message) {
			// The queue exists before anything is published to it.
			conn, err := amqp091.Dial(url)
			require.NoError(t, err)
			ch, err := conn.Channel()
			require.NoError(t, err)
			_, err = ch.QueueDeclare(ns, true, false, false, false, nil)
			require.NoError(t, err)
			conn.Close()
			pub, err := wmamqp.NewPublisher(wmamqp.NewDurableQueueConfig(url), logger)
			require.NoError(t, err)
			defer pub.Close()
			for _, m := range msgs {
				require.NoError(t, pub.Publish(ns, message.NewMessage(m.Key, m.Body)))
			}
			t.Cleanup(func() {
				if conn, err := amqp091.Dial(url); err == nil {
					if ch, err := conn.Channel(); err == nil {
						_, _ = ch.QueueDelete(ns, false, false, false)
					}
					conn.Close()
				}
			})
		},
		Consume: func(ctx context.Context, ns string, env torture.Env) error {
			sub, err := wmamqp.NewSubscriber(wmamqp.NewDurableQueueConfig(url), logger)
			if err != nil {
				return err
			}
			router, err := message.NewRouter(message.RouterConfig{}, logger)
			if err != nil {
				return err
			}
			router.AddMiddleware(dropAcks(env))
			if env.Dedup != nil {
				router.AddMiddleware(watermill.Middleware(env.Dedup, watermill.WithReport(func(msg *message.Message, r idemmsg.Result) {
					env.Decided(msg.UUID, r)
				})))
			}
			router.AddConsumerHandler("pay", ns, sub, func(msg *message.Message) error {
				return env.Effect(msg.Context(), msg.UUID)
			})
			return router.Run(ctx)
		},
		Pending: func(t *testing.T, ns string) int {
			conn, err := amqp091.Dial(url)
			require.NoError(t, err)
			defer conn.Close()
			ch, err := conn.Channel()
			require.NoError(t, err)
			q, err := ch.QueueDeclarePassive(ns, true, false, false, false, nil)
			require.NoError(t, err)
			return q.Messages // ready only; the torture checks again with every consumer gone
		},
	}
}

// TestTorture: the middleware in a Watermill router over RabbitMQ, in
// place of Watermill's in-memory deduplicator: 500 messages, 3 consumer
// processes, one SIGKILLed in the middle of a handler every 2 seconds, one
// first delivery in ten nacked after its handler succeeded: every message's
// side effect happens exactly once, and every message ends acknowledged.
func TestTorture(t *testing.T) {
	torture.Run(t, tortureConfig(t, true)).Check(t)
}

// TestTortureUnguarded is the same router without the middleware.
func TestTortureUnguarded(t *testing.T) {
	torture.Run(t, tortureConfig(t, false)).Check(t)
}
