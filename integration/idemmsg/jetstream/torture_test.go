package jetstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/idemmsg"
	"github.com/idem-go/idem/idemmsg/jetstream"
	"github.com/idem-go/idem/integration/idemmsg/internal/torture"
	"github.com/idem-go/idem/internal/testenv"
)

const ackWait = time.Second // shorter than the torture's slow handlers

// dropAck is a message whose first delivery's ack is lost.
type dropAck struct {
	natsjs.Msg
	drop bool
}

func (m dropAck) Ack() error {
	if m.drop {
		return nil
	}
	return m.Msg.Ack()
}

func tortureConfig(t *testing.T, guarded bool) torture.Config {
	url := testenv.NATSURL(t)
	js := func() (natsjs.JetStream, func()) {
		nc, err := nats.Connect(url, nats.MaxReconnects(-1))
		if err != nil {
			panic(err)
		}
		js, err := natsjs.New(nc)
		if err != nil {
			panic(err)
		}
		return js, nc.Close
	}
	return torture.Config{
		Guarded: guarded,
		Setup: func(t *testing.T, ns string, msgs []torture.Message) {
			j, done := js()
			t.Cleanup(done)
			ctx := context.Background()
			_, err := j.CreateStream(ctx, natsjs.StreamConfig{Name: ns, Subjects: []string{ns + ".>"}, Storage: natsjs.MemoryStorage})
			require.NoError(t, err)
			t.Cleanup(func() { _ = j.DeleteStream(context.Background(), ns) })
			_, err = j.CreateOrUpdateConsumer(ctx, ns, natsjs.ConsumerConfig{Durable: "workers", AckPolicy: natsjs.AckExplicitPolicy, AckWait: ackWait, MaxDeliver: -1})
			require.NoError(t, err)
			for _, m := range msgs {
				_, err := j.PublishMsg(ctx, &nats.Msg{Subject: ns + ".pay", Data: m.Body, Header: nats.Header{natsjs.MsgIDHeader: []string{m.Key}}})
				require.NoError(t, err)
			}
		},
		Consume: func(ctx context.Context, ns string, env torture.Env) error {
			j, _ := js()
			cons, err := j.Consumer(ctx, ns, "workers")
			if err != nil {
				return err
			}
			run := func(ctx context.Context, msg natsjs.Msg) error {
				return env.Effect(ctx, msg.Headers().Get(natsjs.MsgIDHeader))
			}
			var handle natsjs.MessageHandler
			if env.Dedup != nil {
				handle = jetstream.Handler(env.Dedup, run, jetstream.WithInProgress(ackWait/4),
					jetstream.WithReport(func(msg natsjs.Msg, r idemmsg.Result) {
						env.Decided(msg.Headers().Get(natsjs.MsgIDHeader), r)
					}))
			} else {
				handle = func(msg natsjs.Msg) {
					if run(context.Background(), msg) == nil {
						_ = msg.Ack()
					} else {
						_ = msg.Nak()
					}
				}
			}
			cc, err := cons.Consume(func(msg natsjs.Msg) {
				md, _ := msg.Metadata()
				handle(dropAck{Msg: msg, drop: md != nil && md.NumDelivered == 1 && env.DropAck()})
			}, natsjs.PullMaxMessages(4))
			if err != nil {
				return err
			}
			defer cc.Stop()
			<-ctx.Done()
			return nil
		},
		Pending: func(t *testing.T, ns string) int {
			j, done := js()
			defer done()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := j.Consumer(ctx, ns, "workers")
			require.NoError(t, err)
			info, err := c.Info(ctx)
			require.NoError(t, err)
			return int(info.NumPending) + info.NumAckPending
		},
	}
}

// TestTorture: 500 messages, 3 consumer processes, one SIGKILLed in the
// middle of a handler every 2 seconds, the ack of one first delivery in
// ten dropped, an AckWait shorter than one handler in ten: every message's
// side effect happens exactly once, and every message ends acknowledged.
func TestTorture(t *testing.T) {
	torture.Run(t, tortureConfig(t, true)).Check(t)
}

// TestTortureUnguarded is the same run without idemmsg: redeliveries run
// handlers again.
func TestTortureUnguarded(t *testing.T) {
	torture.Run(t, tortureConfig(t, false)).Check(t)
}
