package idemlambda

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/storekit"
)

// Wrap returns h guarded by a Guard on store: for each key (WithKey,
// WithKeyPath; by default the whole event), h runs once across
// invocations, retries and concurrent executions, and every later
// invocation with the key gets h's recorded result (R must be storable
// with encoding/json, as Lambda responses are). The returned function is a
// handler for lambda.Start.
//
// An invocation whose key is being processed by another fails with an
// error matching idem.ErrInProgress (Lambda retries an asynchronous one
// later), or, with WithGuard(idem.OnDuplicate(idem.Wait)), waits for its
// result within its own deadline. One whose payload (WithPayload,
// WithPayloadPath) differs from the first's fails with
// idem.ErrPayloadMismatch; one without a key with ErrNoKey. An error of h
// releases the claim (the retry runs h again), unless
// WithGuard(idem.OnFailure(idem.Lock)) records it. h's context carries the
// claim's fencing token (idem.FencingToken), and idem.Step works in it.
//
// Wrap fails with an error matching idem.ErrInvalidOption when an option is
// invalid (a JMESPath expression that does not compile, a WithKey function
// of another event type), h is nil, or store is nil.
func Wrap[E, R any](store storekit.Store, h func(context.Context, E) (R, error), opts ...Option) (func(context.Context, E) (R, error), error) {
	c, err := newConfig(kindEvent, opts)
	if err != nil {
		return nil, err
	}
	if h == nil {
		return nil, optionError("Wrap", "handler is nil")
	}
	x, err := newExtractor(c, wholeEvent[E], nil)
	if err != nil {
		return nil, err
	}
	if store == nil {
		return nil, optionError("Wrap", "store is nil")
	}
	g, err := idem.New[R](wrapStore(store), c.guardOptions()...)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, e E) (R, error) {
		key, payload, hasPayload, err := x.extract(e)
		if err != nil {
			if c.optional && isNoKey(err) {
				return h(ctx, e)
			}
			var zero R
			return zero, err
		}
		fn := func(ctx context.Context) (R, error) { return h(ctx, e) }
		if hasPayload {
			return g.Do(c.invocation(ctx), key, fn, idem.Payload(payload))
		}
		return g.Do(c.invocation(ctx), key, fn)
	}, nil
}

// wholeEvent is Wrap's default key: the SHA-256 of the event's canonical
// JSON (idem.Key), as Powertools keys an event without an expression.
func wholeEvent[E any](e E) (string, error) {
	k, err := idem.Key("idemlambda.event", e)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256([]byte(k))
	return hex.EncodeToString(sum[:]), nil
}
