// Package watermill is a Watermill (github.com/ThreeDotsLabs/watermill)
// router middleware that runs each message's handler at most once per key
// across every consumer that shares an idem store: a persistent
// replacement for Watermill's in-memory deduplicator.
//
//	d, _ := idemmsg.New(store, idemmsg.WithGuard(idem.WithTakeoverAfter(10*time.Second)))
//	router.AddMiddleware(watermill.Middleware(d))
//
// Unlike the in-memory deduplicator, a message is marked done only once its
// handler succeeded and the outcome is recorded; a handler that fails
// releases the key, so the redelivery runs again. The messages a handler
// produces are recorded with its outcome, and a redelivery of a message
// already done returns the same messages (same UUIDs, metadata and
// payloads) without running the handler, so a consumer that died between
// recording and publishing loses nothing, and downstream sees the same
// UUIDs to deduplicate on.
//
// The key is the message UUID, or a metadata field (WithMetadataKey). A
// decision to retry returns an error (the router nacks, the message is
// redelivered), after the busy delay when the key runs elsewhere. A
// decision to refuse for good (same key, another payload; a failure
// recorded under idem.OnFailure(idem.Lock); no key) has no Watermill
// equivalent of a terminal nack: the message is acknowledged without
// running and reported through WithReport (by default, logged with
// log/slog's default logger).
package watermill

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/idem-go/idem/idemmsg"
)

// Option configures Middleware.
type Option func(*config)

type config struct {
	metadataKey string
	report      func(*message.Message, idemmsg.Result)
}

// WithMetadataKey keys messages by the metadata field name instead of the
// message UUID. A message without the field is refused.
func WithMetadataKey(name string) Option {
	return func(c *config) { c.metadataKey = name }
}

// WithReport is called with every message's decision: for logs and metrics
// (Result.Err says why a message was retried or refused).
func WithReport(report func(*message.Message, idemmsg.Result)) Option {
	return func(c *config) { c.report = report }
}

// logRefusal is the default report: refused messages are logged.
func logRefusal(msg *message.Message, r idemmsg.Result) {
	if r.Action == idemmsg.Reject {
		slog.Warn("idemmsg/watermill: message refused and acknowledged without running", "uuid", msg.UUID, "err", r.Err)
	}
}

// produced is the recorded form of a message a handler produced.
type produced struct {
	UUID     string            `json:"uuid"`
	Metadata map[string]string `json:"metadata,omitempty"`
	Payload  []byte            `json:"payload"`
}

// Middleware returns the router middleware.
func Middleware(d *idemmsg.Dedup, opts ...Option) message.HandlerMiddleware {
	c := config{report: logRefusal}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			out, r := handle(c, d, h, msg)
			if c.report != nil {
				c.report(msg, r)
			}
			switch r.Action {
			case idemmsg.Ack:
				return out, nil
			case idemmsg.Reject:
				return nil, nil
			default:
				if r.Delay > 0 {
					wait(msg.Context(), r.Delay)
				}
				if r.Err == nil {
					r.Err = fmt.Errorf("idemmsg/watermill: message %s to be redelivered", msg.UUID)
				}
				return nil, r.Err
			}
		}
	}
}

func handle(c config, d *idemmsg.Dedup, h message.HandlerFunc, msg *message.Message) ([]*message.Message, idemmsg.Result) {
	key := msg.UUID
	if c.metadataKey != "" {
		key = msg.Metadata.Get(c.metadataKey)
	}
	if key == "" {
		return nil, idemmsg.Result{Action: idemmsg.Reject, Err: &storekit.KeyError{Reason: "message has no key"}}
	}
	var msgs []*message.Message
	rec, r := d.HandleOutput(msg.Context(), key, msg.Payload, func(context.Context) ([]byte, error) {
		var err error
		msgs, err = h(msg)
		if err != nil {
			return nil, err
		}
		return encode(msgs)
	})
	if r.Action != idemmsg.Ack || r.Ran {
		return msgs, r
	}
	replayed, err := decode(rec)
	if err != nil {
		return nil, idemmsg.Result{Action: idemmsg.Reject, Err: err}
	}
	return replayed, r
}

func encode(msgs []*message.Message) ([]byte, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	p := make([]produced, len(msgs))
	for i, m := range msgs {
		p[i] = produced{UUID: m.UUID, Metadata: m.Metadata, Payload: m.Payload}
	}
	return json.Marshal(p)
}

func decode(b []byte) ([]*message.Message, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var p []produced
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, &storekit.CorruptRecordError{Err: fmt.Errorf("produced messages do not decode: %w", err)}
	}
	out := make([]*message.Message, len(p))
	for i, m := range p {
		out[i] = message.NewMessage(m.UUID, m.Payload)
		for k, v := range m.Metadata {
			out[i].Metadata.Set(k, v)
		}
	}
	return out, nil
}

func wait(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
