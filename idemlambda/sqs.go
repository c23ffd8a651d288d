package idemlambda

import (
	"context"
	"errors"

	"github.com/aws/aws-lambda-go/events"
	"github.com/idem-go/idem"
	"github.com/idem-go/idem/storekit"
)

// SQS returns a handler for an SQS event source that runs h once per
// record key across deliveries, retries and concurrent executions, and
// reports the records that failed as the response's BatchItemFailures, so
// that SQS redelivers those alone. The event source mapping must have
// ReportBatchItemFailures in its FunctionResponseTypes: without it, SQS
// ignores the list and redelivers the whole batch (whose records already
// processed are then skipped all the same).
//
// A record's key is its message ID (a redelivery keeps it), or what WithKey
// or WithKeyPath take from the record (E is events.SQSMessage; in JMESPath
// the record as JSON: `powertools_json(body).order_id`), for producers that
// may send one message twice. Its payload is its body, unless WithPayload or
// WithPayloadPath selects another: the same key with another body is
// refused, never run.
//
// Records run one after another, in the batch's order. A record succeeds
// when h returns nil or when its key was processed before (a duplicate,
// in this batch or an earlier one: skipped, h not run). It fails when h
// returns an error (its claim is released: the redelivery runs h again),
// when its key is being processed elsewhere (idem.ErrInProgress), when its
// payload differs from the first record's with the key
// (idem.ErrPayloadMismatch: it is redelivered until the queue's redrive
// policy moves it to the dead-letter queue), when it has no key (unless
// WithKeyOptional), or when the store fails. In a FIFO queue (records with
// a MessageGroupId), the first failure fails the records after it too,
// unprocessed, so that order within a message group holds.
//
// SQS fails with an error matching idem.ErrInvalidOption when an option is
// invalid, h is nil, or store is nil.
func SQS(store storekit.Store, h func(context.Context, events.SQSMessage) error, opts ...Option) (func(context.Context, events.SQSEvent) (events.SQSEventResponse, error), error) {
	c, err := newConfig(kindSQS, opts)
	if err != nil {
		return nil, err
	}
	if h == nil {
		return nil, optionError("SQS", "handler is nil")
	}
	x, err := newExtractor(c, messageID, messageBody)
	if err != nil {
		return nil, err
	}
	if store == nil {
		return nil, optionError("SQS", "store is nil")
	}
	g, err := idem.New[struct{}](wrapStore(store), c.guardOptions()...)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		var resp events.SQSEventResponse
		ictx := c.invocation(ctx)
		failed := false
		for _, msg := range ev.Records {
			if failed && msg.Attributes["MessageGroupId"] != "" {
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: msg.MessageId})
				continue
			}
			if err := c.record(ictx, g, x, h, msg); err != nil {
				failed = true
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: msg.MessageId})
			}
		}
		return resp, nil
	}, nil
}

// record processes one SQS record.
func (c *config) record(ctx context.Context, g *idem.Guard[struct{}], x *extractor[events.SQSMessage], h func(context.Context, events.SQSMessage) error, msg events.SQSMessage) error {
	key, payload, hasPayload, err := x.extract(msg)
	if err != nil {
		if c.optional && isNoKey(err) {
			return h(ctx, msg)
		}
		return err
	}
	fn := func(ctx context.Context) (struct{}, error) { return struct{}{}, h(ctx, msg) }
	if hasPayload {
		_, err = g.Do(ctx, key, fn, idem.Payload(payload))
	} else {
		_, err = g.Do(ctx, key, fn)
	}
	if errors.Is(err, idem.ErrDuplicate) && !errors.Is(err, idem.ErrInProgress) {
		return nil // processed before, policy idem.Raise: skipped all the same
	}
	return err
}

// messageID is an SQS record's default key.
func messageID(m events.SQSMessage) (string, error) { return m.MessageId, nil }

// messageBody is an SQS record's default payload.
func messageBody(m events.SQSMessage) (any, bool) { return m.Body, true }
