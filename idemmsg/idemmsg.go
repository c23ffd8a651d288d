// Package idemmsg runs a message handler at most once per message key,
// across every consumer process that shares a store, and tells the consumer
// what to do with the message: acknowledge it, have it redelivered later,
// or refuse it for good.
//
//	store, err := redisstore.New(redis.NewClient(&redis.Options{Addr: addr}))
//	d, err := idemmsg.New(store, idemmsg.WithGuard(idem.WithTakeoverAfter(10*time.Second)))
//	res := d.Handle(ctx, msgID, body, func(ctx context.Context) error {
//		return charge(ctx, body) // runs once per msgID, whatever the redeliveries
//	})
//	// res.Action: idemmsg.Ack, Retry (after res.Delay) or Reject.
//
// The subpackages wire a Dedup to a broker, so a consumer needs only the
// one line of its broker:
//
//   - idemmsg/jetstream: NATS JetStream (github.com/nats-io/nats.go/jetstream)
//   - idemmsg/amqp: RabbitMQ and other AMQP 0-9-1 brokers (github.com/rabbitmq/amqp091-go)
//   - idemmsg/watermill: a Watermill router middleware (github.com/ThreeDotsLabs/watermill)
//
// Every broker redelivers: a consumer that dies before its ack, an ack lost
// on the wire, a redelivery timer that fires while a slow handler still
// runs. A handler guarded by idemmsg runs once per key whatever the
// redeliveries, and the message is acknowledged only once its outcome is
// recorded.
//
// # What Handle decides
//
// Handle(ctx, key, body, handler) calls the handler through an idem.Guard
// keyed by key, with the SHA-256 of body as the payload:
//
//	handler ran and returned nil, outcome recorded   Ack
//	key already done (a redelivery, a duplicate)     Ack, Replayed, handler not run
//	handler ran, outcome could not be recorded       Ack, with Err (ErrNotRecorded or
//	                                                 ErrOutcomeUnknown): running it again
//	                                                 would repeat its side effect
//	the same key runs in another consumer now        Retry after the busy delay
//	handler returned an error (OnFailure(Unlock))    Retry at once: the claim was released
//	store failure before the handler ran             Retry at once, handler not run
//	claim lost while the handler ran                 Retry: the new owner's record decides
//	handler cut off by its context (the consumer     Retry: the claim was released, even
//	stopping, a lapsed claim)                        under OnFailure(Lock)
//	same key, another body                           Reject, handler not run
//	failure recorded under OnFailure(Lock)           Reject
//
// Retry means "redeliver": JetStream Nak or NakWithDelay, AMQP Nack with
// requeue, a handler error in Watermill. Reject means "never again":
// JetStream Term, AMQP Reject without requeue; Watermill has no such
// answer, so the middleware acknowledges the message and reports it (see
// idemmsg/watermill).
//
// A handler that runs longer than the broker's redelivery timeout is kept
// by the Guard's heartbeat: a redelivery that arrives meanwhile, at this
// consumer or another, finds the key in progress and is retried later,
// never run twice. A consumer killed in the middle of the handler leaves a
// claim that goes stale after the Guard's takeover threshold
// (idem.WithTakeoverAfter, through WithGuard); the next redelivery after
// that runs the handler again. Use idem.Step inside the handler for side
// effects that must not be repeated even then.
package idemmsg

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

// Action is what a consumer does with a message after Handle.
type Action int

// Actions.
const (
	// Ack acknowledges the message: its handler ran (now or before).
	Ack Action = iota + 1
	// Retry has the message redelivered, after Result.Delay.
	Retry
	// Reject refuses the message for good: it must not be redelivered.
	Reject
)

// String returns "ack", "retry" or "reject".
func (a Action) String() string {
	switch a {
	case Ack:
		return "ack"
	case Retry:
		return "retry"
	case Reject:
		return "reject"
	}
	return fmt.Sprintf("Action(%d)", int(a))
}

// Result is what Handle decided for a message.
type Result struct {
	Action Action
	// Delay is how long to wait before the message is redelivered, for
	// Retry: the busy delay when the key runs elsewhere, else 0.
	Delay time.Duration
	// Ran is true when the handler ran in this call.
	Ran bool
	// Replayed is true when the key was already done and the handler did
	// not run.
	Replayed bool
	// Err says why, for Retry and Reject; for Ack it is nil, or says the
	// handler ran but its outcome may not be recorded.
	Err error
}

// DefaultBusyDelay is how long a message whose key runs in another consumer
// waits before it is redelivered.
const DefaultBusyDelay = time.Second

// Dedup runs message handlers at most once per key. It is safe for
// concurrent use. The zero value is not usable; call New.
type Dedup struct {
	g    *idem.Guard[[]byte]
	busy time.Duration
}

// Option configures a Dedup.
type Option func(*config)

type config struct {
	guard []idem.Option
	busy  time.Duration
	errs  []error
}

// WithGuard passes options to the idem.Guard underneath: the takeover
// threshold and heartbeat (set the threshold well above your handlers'
// pauses and below the broker's redelivery timeout times its retries), the
// TTL of done keys (longer than the broker can redeliver), a namespace, an
// observer, OnFailure. OnDuplicate is not accepted: a consumer never waits
// for another consumer's run, it retries the message later.
func WithGuard(opts ...idem.Option) Option {
	return func(c *config) { c.guard = append(c.guard, opts...) }
}

// WithBusyDelay sets how long a message whose key runs in another consumer
// waits before it is redelivered (default DefaultBusyDelay; at least 1ms).
func WithBusyDelay(d time.Duration) Option {
	return func(c *config) {
		if d < time.Millisecond {
			c.errs = append(c.errs, &storekit.OptionError{Option: "idemmsg.WithBusyDelay", Reason: fmt.Sprintf("delay %v is under 1ms", d)})
			return
		}
		c.busy = d
	}
}

// New returns a Dedup over store. It fails with an error matching
// idem.ErrInvalidOption if an option is invalid.
func New(store storekit.Store, opts ...Option) (*Dedup, error) {
	c := config{busy: DefaultBusyDelay}
	for _, o := range opts {
		if o == nil {
			c.errs = append(c.errs, &storekit.OptionError{Option: "idemmsg.New", Reason: "nil option"})
			continue
		}
		o(&c)
	}
	g, err := idem.New[[]byte](store, c.guard...)
	if err != nil {
		c.errs = append(c.errs, err)
	} else if info, _ := guardinfo.Of(g); info.Wait {
		c.errs = append(c.errs, &storekit.OptionError{Option: "idemmsg.WithGuard", Reason: "OnDuplicate(Wait) holds a consumer on another's message; redeliveries are retried instead"})
	}
	if err := errors.Join(c.errs...); err != nil {
		return nil, err
	}
	return &Dedup{g: g, busy: c.busy}, nil
}

// Guard returns the Guard underneath, for its storage keys and policies.
func (d *Dedup) Guard() *idem.Guard[[]byte] { return d.g }

// BodyHash returns the payload Handle records for body: its SHA-256, hex.
func BodyHash(body []byte) string {
	sum := sha256.Sum256(body)
	return hex.EncodeToString(sum[:])
}

// Handle runs handler at most once for key and says what to do with the
// message (see the package documentation). body is the message body: a
// redelivery of key with another body is rejected without running. An
// empty key is refused (Reject, with an error matching idem.ErrInvalidKey).
func (d *Dedup) Handle(ctx context.Context, key string, body []byte, handler func(context.Context) error) Result {
	if handler == nil {
		return Result{Action: Reject, Err: &storekit.OptionError{Option: "idemmsg.Handle", Reason: "nil handler"}}
	}
	_, r := d.HandleOutput(ctx, key, body, func(ctx context.Context) ([]byte, error) { return nil, handler(ctx) })
	return r
}

// HandleOutput is Handle for a handler with an output that must be the same
// on every delivery of the message (the messages a Watermill handler
// produces, say): the output of the run is recorded with its outcome, and
// a message already done gets the recorded output back (Ack, Replayed).
func (d *Dedup) HandleOutput(ctx context.Context, key string, body []byte, handler func(context.Context) ([]byte, error)) ([]byte, Result) {
	if d == nil || d.g == nil {
		return nil, Result{Action: Retry, Err: &storekit.OptionError{Option: "idemmsg.Dedup", Reason: "nil or zero Dedup: use New"}}
	}
	if handler == nil {
		return nil, Result{Action: Reject, Err: &storekit.OptionError{Option: "idemmsg.HandleOutput", Reason: "nil handler"}}
	}
	var (
		ran    bool
		runErr error
	)
	out, err := d.g.Do(ctx, key, func(ctx context.Context) ([]byte, error) {
		ran = true
		var out []byte
		out, runErr = handler(ctx)
		return out, runErr
	}, idem.Payload(BodyHash(body)))
	return out, d.decide(ran, runErr, err)
}

// givenUp reports whether a handler's error is a context's: the Guard
// releases a call whose context ended and whose fn returned that context's
// error, even under Lock, so its message must be redelivered, not
// rejected. (A context error from a context of the handler's own is
// recorded under Lock; its message is retried once, and the redelivery is
// rejected with ErrPreviousFailure: one delivery more, nothing lost.)
func givenUp(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}

func (d *Dedup) decide(ran bool, runErr, err error) Result {
	r := Result{Ran: ran, Err: err}
	switch {
	case err == nil:
		r.Action, r.Replayed = Ack, !ran
	case errors.Is(err, idem.ErrPayloadMismatch), errors.Is(err, idem.ErrInvalidKey):
		r.Action = Reject
	case errors.Is(err, idem.ErrInProgress):
		r.Action, r.Delay = Retry, d.busy
	case errors.Is(err, idem.ErrLostOwnership):
		r.Action = Retry
	case ran && (errors.Is(err, idem.ErrNotRecorded) || errors.Is(err, idem.ErrOutcomeUnknown)) && runErr == nil:
		r.Action = Ack // ran: a redelivery must not run it again
	case errors.Is(err, idem.ErrPreviousFailure):
		r.Action = Reject
	case errors.Is(err, idem.ErrDuplicate): // a done key under OnDuplicate(Raise)
		r.Action, r.Replayed, r.Err = Ack, true, nil
	case ran && runErr != nil && d.locks() && !givenUp(runErr):
		r.Action = Reject // recorded as a failure: a redelivery would be refused
	default: // the handler failed and was released, or the store failed
		r.Action = Retry
	}
	return r
}

// locks reports whether d's Guard records failures (OnFailure(Lock)).
func (d *Dedup) locks() bool {
	info, _ := guardinfo.Of(d.g)
	return info.Lock
}
