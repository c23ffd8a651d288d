package idemlambda

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/storekit"
)

// ErrNoKey is matched by the error of an invocation (or an SQS record)
// whose event holds no key: the key function returned "", or the
// WithKeyPath expression found nothing (null or an empty string) or failed.
// The handler did not run. WithKeyOptional runs it unguarded instead.
var ErrNoKey = errors.New("idemlambda: no idempotency key in the event")

// NoKeyError says why an event has no key. It matches ErrNoKey.
type NoKeyError struct {
	// Expr is the WithKeyPath expression, "" for a WithKey function.
	Expr string
	// Err is the expression's or the function's error, nil when it found
	// nothing.
	Err error
}

func (e *NoKeyError) Error() string {
	s := "idemlambda: no idempotency key in the event"
	if e.Expr != "" {
		s += fmt.Sprintf(" (expression %q)", e.Expr)
	}
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Is makes a NoKeyError match ErrNoKey.
func (e *NoKeyError) Is(target error) bool { return target == ErrNoKey }

// Unwrap returns the expression's or the function's error.
func (e *NoKeyError) Unwrap() error { return e.Err }

// Option configures Wrap, SQS, APIGateway and APIGatewayV2. Each checks
// its options and returns an error matching idem.ErrInvalidOption for one
// that is invalid or does not apply to it.
type Option func(*config)

type config struct {
	keyFn       any // func(E) (string, error)
	keyPath     *path
	payloadFn   any // func(E) (any, error)
	payloadPath *path
	optional    bool
	grace       time.Duration
	guardOpts   []idem.Option
	httpOpts    []idemhttp.Option
	set         map[string]bool // options given, by name
	errs        []error
}

func (c *config) invalid(option, format string, args ...any) {
	c.errs = append(c.errs, &storekit.OptionError{Option: option, Reason: fmt.Sprintf(format, args...)})
}

// WithKey sets the function that takes the key from the event (for SQS,
// from each record: E is events.SQSMessage). E must be the wrapped
// handler's event type. A function that returns "" finds no key (ErrNoKey);
// one that returns an error fails the invocation with a *NoKeyError
// wrapping it. Not for APIGateway and APIGatewayV2, whose key is the
// Idempotency-Key header.
func WithKey[E any](key func(E) (string, error)) Option {
	return func(c *config) {
		c.mark("WithKey")
		if key == nil {
			c.invalid("WithKey", "function is nil")
		}
		c.keyFn = key
	}
}

// WithKeyPath sets a JMESPath expression (jmespath.org, as Powertools for
// AWS Lambda's event_key_jmespath) that finds the key in the event as JSON:
// a string is the key as it is; a number, a list or an object is the key
// as its JSON ("[order_id, customer]"); nothing (null) or "" is no key
// (ErrNoKey). Powertools' functions powertools_json, powertools_base64 and
// powertools_base64_gzip are available:
// `powertools_json(body).order_id` reads a field of a JSON body. An
// expression that does not compile is an invalid option.
func WithKeyPath(expr string) Option {
	return func(c *config) {
		c.mark("WithKeyPath")
		p, err := compilePath(expr)
		if err != nil {
			c.invalid("WithKeyPath", "expression %q: %v", expr, err)
		}
		c.keyPath = p
	}
}

// WithPayload sets the function that takes the payload from the event: the
// part of it that must be the same whenever the key is. A later event with
// the key and another payload fails with idem.ErrPayloadMismatch, and the
// handler does not run. E must be the handler's event type (for SQS,
// events.SQSMessage). Values are compared by their canonical JSON.
func WithPayload[E any](payload func(E) (any, error)) Option {
	return func(c *config) {
		c.mark("WithPayload")
		if payload == nil {
			c.invalid("WithPayload", "function is nil")
		}
		c.payloadFn = payload
	}
}

// WithPayloadPath sets a JMESPath expression (as Powertools'
// payload_validation_jmespath) that selects the payload from the event, as
// WithPayload does with a function: "[amount, currency]".
func WithPayloadPath(expr string) Option {
	return func(c *config) {
		c.mark("WithPayloadPath")
		p, err := compilePath(expr)
		if err != nil {
			c.invalid("WithPayloadPath", "expression %q: %v", expr, err)
		}
		c.payloadPath = p
	}
}

// WithKeyOptional runs the handler unguarded for an event without a key,
// where by default the invocation fails with ErrNoKey (Powertools'
// raise_on_no_idempotency_key, inverted). Not for APIGateway and
// APIGatewayV2: there, a request without the header passes through unless
// idemhttp.WithRequired is given to WithHTTP.
func WithKeyOptional() Option {
	return func(c *config) {
		c.mark("WithKeyOptional")
		c.optional = true
	}
}

// WithDeadlineGrace sets how long past its invocation's deadline a claim
// stays alive (default DefaultDeadlineGrace, 250ms; zero or more, at most a
// minute): the clock skew allowed between the hosts of an invocation and
// of its retry. A retry of an invocation that timed out runs once the
// deadline and the grace have passed.
func WithDeadlineGrace(d time.Duration) Option {
	return func(c *config) {
		if d < 0 || d > time.Minute {
			c.invalid("WithDeadlineGrace", "grace must be between 0 and 1m, got %v", d)
		}
		c.grace = d
	}
}

// WithGuard passes options to the idem Guard underneath: TTL, takeover
// threshold, heartbeat, secret, namespace, observer, duplicate and failure
// policy (for APIGateway and APIGatewayV2 as idemhttp.WithGuard has them).
// By default the Guard's namespace is the function's name
// (AWS_LAMBDA_FUNCTION_NAME), so that two functions sharing a table never
// share a key; idem.WithNamespace replaces it.
func WithGuard(opts ...idem.Option) Option {
	return func(c *config) { c.guardOpts = append(c.guardOpts, opts...) }
}

// WithHTTP passes options to the idemhttp middleware that answers API
// Gateway requests (APIGateway and APIGatewayV2 only): WithPrincipal,
// WithRequired, WithMethods, WithRecordStatus, WithReplayHeaders, ... The
// principal function may read the event with APIGatewayRequest or
// APIGatewayV2Request from the request's context.
func WithHTTP(opts ...idemhttp.Option) Option {
	return func(c *config) {
		c.mark("WithHTTP")
		c.httpOpts = append(c.httpOpts, opts...)
	}
}

func (c *config) mark(name string) {
	if c.set == nil {
		c.set = map[string]bool{}
	}
	c.set[name] = true
}

// kind is what an adapter is, for the options it accepts.
type kind int

const (
	kindEvent kind = iota // Wrap
	kindSQS               // SQS
	kindHTTP              // APIGateway, APIGatewayV2
)

// newConfig applies opts for an adapter of kind k and checks them (the
// types of WithKey and WithPayload functions are checked by newExtractor).
func newConfig(k kind, opts []Option) (*config, error) {
	c := &config{grace: DefaultDeadlineGrace}
	for _, o := range opts {
		if o == nil {
			c.invalid("New", "nil option")
			continue
		}
		o(c)
	}
	var refused []string
	switch k {
	case kindEvent, kindSQS:
		refused = []string{"WithHTTP"}
	case kindHTTP:
		refused = []string{"WithKey", "WithKeyPath", "WithPayload", "WithPayloadPath", "WithKeyOptional"}
	}
	for _, name := range refused {
		if c.set[name] {
			c.invalid(name, "does not apply here (the key of an API Gateway request is its Idempotency-Key header; WithHTTP is for APIGateway and APIGatewayV2)")
		}
	}
	if c.set["WithKey"] && c.set["WithKeyPath"] {
		c.invalid("WithKey", "WithKey and WithKeyPath both given: one key, one way")
	}
	if c.set["WithPayload"] && c.set["WithPayloadPath"] {
		c.invalid("WithPayload", "WithPayload and WithPayloadPath both given")
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	return c, nil
}

// guardOptions are the options of the Guard underneath: the function's
// name as the default namespace, then the user's.
func (c *config) guardOptions() []idem.Option {
	opts := make([]idem.Option, 0, len(c.guardOpts)+1)
	if name := os.Getenv("AWS_LAMBDA_FUNCTION_NAME"); name != "" {
		opts = append(opts, idem.WithNamespace("", name))
	}
	return append(opts, c.guardOpts...)
}

// invocation returns the context a guarded call of the invocation ctx
// runs under: it carries the end of the invocation's claims.
func (c *config) invocation(ctx context.Context) context.Context {
	return withEnd(ctx, c.grace)
}

func optionError(option, reason string) error {
	return &storekit.OptionError{Option: option, Reason: reason}
}
