package amqp_test

import (
	"context"
	"testing"

	amqp091 "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/idemmsg/amqp"
	"github.com/idem-go/idem/integration/idemmsg/internal/torture"
	"github.com/idem-go/idem/internal/testenv"
)

// dropAcker loses the ack of a delivery the way AMQP loses one: the
// connection goes down before the ack is sent, and RabbitMQ redelivers
// every delivery the connection held unacknowledged.
type dropAcker struct{ conn *amqp091.Connection }

func (d dropAcker) Ack(uint64, bool) error        { d.conn.Close(); return amqp091.ErrClosed }
func (d dropAcker) Nack(uint64, bool, bool) error { d.conn.Close(); return amqp091.ErrClosed }
func (d dropAcker) Reject(uint64, bool) error     { d.conn.Close(); return amqp091.ErrClosed }

// consume consumes ns on a connection of its own until the connection is
// lost (a dropped ack), running every delivery through run, guarded by
// env.Dedup when it is set.
func consume(ctx context.Context, url, ns string, env torture.Env, run func(context.Context, amqp091.Delivery) error) error {
	conn, ch, err := channel(url)
	if err != nil {
		return err
	}
	defer conn.Close()
	if err := ch.Qos(4, 0, false); err != nil {
		return err
	}
	deliveries, err := ch.Consume(ns, "", false, false, false, false, nil)
	if err != nil {
		return err
	}
	for del := range deliveries {
		if !del.Redelivered && env.DropAck() {
			del.Acknowledger = dropAcker{conn}
		}
		if env.Dedup != nil {
			env.Decided(del.MessageId, amqp.Handle(ctx, env.Dedup, del, run))
			continue
		}
		if run(ctx, del) == nil {
			_ = del.Ack(false)
		} else {
			_ = del.Nack(false, true)
		}
	}
	return nil
}

func channel(url string) (*amqp091.Connection, *amqp091.Channel, error) {
	conn, err := amqp091.Dial(url)
	if err != nil {
		return nil, nil, err
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, ch, nil
}

func tortureConfig(t *testing.T, guarded bool) torture.Config {
	url := testenv.AMQPURL(t)
	return torture.Config{
		Guarded: guarded,
		Setup: func(t *testing.T, ns string, msgs []torture.Message) {
			conn, ch, err := channel(url)
			require.NoError(t, err)
			t.Cleanup(func() { conn.Close() })
			_, err = ch.QueueDeclare(ns, false, false, false, false, nil)
			require.NoError(t, err)
			t.Cleanup(func() {
				if _, ch, err := channel(url); err == nil {
					_, _ = ch.QueueDelete(ns, false, false, false)
				}
			})
			for _, m := range msgs {
				require.NoError(t, ch.PublishWithContext(context.Background(), "", ns, false, false,
					amqp091.Publishing{MessageId: m.Key, Body: m.Body}))
			}
		},
		Consume: func(ctx context.Context, ns string, env torture.Env) error {
			run := func(ctx context.Context, del amqp091.Delivery) error { return env.Effect(ctx, del.MessageId) }
			for {
				if err := consume(ctx, url, ns, env, run); err != nil {
					return err
				}
			}
		},
		Pending: func(t *testing.T, ns string) int {
			conn, ch, err := channel(url)
			require.NoError(t, err)
			defer conn.Close()
			q, err := ch.QueueDeclarePassive(ns, false, false, false, false, nil)
			require.NoError(t, err)
			// Ready messages only: unacknowledged ones show up here once
			// their consumer is gone, which the torture checks last.
			return q.Messages
		},
	}
}

// TestTorture: 500 messages, 3 consumer processes, one SIGKILLed in the
// middle of a handler every 2 seconds (its unacknowledged deliveries are
// redelivered), the ack of one first delivery in ten lost: every message's
// side effect happens exactly once, and every message ends acknowledged.
func TestTorture(t *testing.T) {
	torture.Run(t, tortureConfig(t, true)).Check(t)
}

// TestTortureUnguarded is the same run without idemmsg.
func TestTortureUnguarded(t *testing.T) {
	torture.Run(t, tortureConfig(t, false)).Check(t)
}
