// Package jetstream guards NATS JetStream message handlers with an
// idemmsg.Dedup: each message key's handler runs at most once across every
// consumer, and the message is acknowledged only once its outcome is
// recorded.
//
//	d, _ := idemmsg.New(store, idemmsg.WithGuard(idem.WithTakeoverAfter(10*time.Second)))
//	cons.Consume(jetstream.Handler(d, func(ctx context.Context, msg natsjs.Msg) error {
//		return charge(ctx, msg.Data())
//	}))
//
// The key is the message's Nats-Msg-Id header (the id JetStream also
// deduplicates publishes by), else the stream name and stream sequence,
// which every redelivery of the message keeps. What Handle decides is
// answered with Ack (done, or done before), NakWithDelay (the same key runs
// in another consumer), Nak (the handler failed, or the store did: the
// handler did not run), or Term (the same key with another body; a
// failure recorded under idem.OnFailure(idem.Lock)).
//
// While the handler runs, InProgress is sent every WithInProgress interval
// (default 5s) so the consumer's AckWait does not redeliver the message to
// another consumer meanwhile; the Guard's heartbeat keeps the claim alive
// in the store at the same time. Set the interval below the consumer's
// AckWait.
package jetstream

import (
	"context"
	"fmt"
	"strconv"
	"time"

	natsjs "github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem/idemmsg"
	"github.com/idem-go/idem/storekit"
)

// Option configures Handler.
type Option func(*config)

type config struct {
	ctx        func() context.Context
	key        func(natsjs.Msg) (string, error)
	inProgress time.Duration
	report     func(natsjs.Msg, idemmsg.Result)
}

// WithContext sets the context handlers run under (default
// context.Background()); a cancelled context makes every message Nak
// without running.
func WithContext(ctx func() context.Context) Option {
	return func(c *config) {
		if ctx != nil {
			c.ctx = ctx
		}
	}
}

// WithKey replaces the default key (Nats-Msg-Id, else stream and
// sequence). A key function that fails, or returns "", makes the message
// Term: it could never be deduplicated.
func WithKey(key func(natsjs.Msg) (string, error)) Option {
	return func(c *config) {
		if key != nil {
			c.key = key
		}
	}
}

// WithInProgress sets how often InProgress is sent while a handler runs
// (default 5s; 0 sends none).
func WithInProgress(d time.Duration) Option {
	return func(c *config) {
		if d >= 0 {
			c.inProgress = d
		}
	}
}

// WithReport is called with every message's decision after it was
// answered: for logs and metrics (Result.Err says why a message was
// retried or refused).
func WithReport(report func(natsjs.Msg, idemmsg.Result)) Option {
	return func(c *config) { c.report = report }
}

// Key returns the default key of msg: its Nats-Msg-Id header, else
// "<stream>:<stream sequence>".
func Key(msg natsjs.Msg) (string, error) {
	if id := msg.Headers().Get(natsjs.MsgIDHeader); id != "" {
		return id, nil
	}
	md, err := msg.Metadata()
	if err != nil {
		return "", fmt.Errorf("idemmsg/jetstream: message has no id and no metadata: %w", err)
	}
	return md.Stream + ":" + strconv.FormatUint(md.Sequence.Stream, 10), nil
}

// Handler returns a natsjs.MessageHandler that runs h through d and
// answers every message.
func Handler(d *idemmsg.Dedup, h func(context.Context, natsjs.Msg) error, opts ...Option) natsjs.MessageHandler {
	c := config{ctx: context.Background, key: Key, inProgress: 5 * time.Second}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return func(msg natsjs.Msg) {
		r := handle(c, d, h, msg)
		answer(msg, r)
		if c.report != nil {
			c.report(msg, r)
		}
	}
}

func handle(c config, d *idemmsg.Dedup, h func(context.Context, natsjs.Msg) error, msg natsjs.Msg) idemmsg.Result {
	key, err := c.key(msg)
	if err == nil && key == "" {
		err = &storekit.KeyError{Reason: "empty message key"}
	}
	if err != nil {
		return idemmsg.Result{Action: idemmsg.Reject, Err: err}
	}
	return d.Handle(c.ctx(), key, msg.Data(), func(ctx context.Context) error {
		if c.inProgress > 0 {
			stop := keepInProgress(msg, c.inProgress)
			defer stop()
		}
		return h(ctx, msg)
	})
}

// keepInProgress sends InProgress every d until stop is called.
func keepInProgress(msg natsjs.Msg, d time.Duration) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				_ = msg.InProgress()
			case <-done:
				return
			}
		}
	}()
	return func() { close(done) }
}

// answer tells JetStream what was decided. A lost answer is a redelivery,
// which the Dedup answers again.
func answer(msg natsjs.Msg, r idemmsg.Result) {
	switch r.Action {
	case idemmsg.Ack:
		_ = msg.Ack()
	case idemmsg.Reject:
		_ = msg.Term() // not TermWithReason: servers before 2.10.4 ignore it (WithReport has the reason)
	default:
		if r.Delay > 0 {
			_ = msg.NakWithDelay(r.Delay)
		} else {
			_ = msg.Nak()
		}
	}
}
