package idemgrpc

import (
	"context"
	"strings"

	"github.com/idem-go/idem/storekit"

	"google.golang.org/grpc/codes"

	"github.com/idem-go/idem"
)

// DefaultRecordCode is the default of WithRecordCode: every code is
// recorded but those a gRPC client retries (and grpc-go's service-config
// retry policies name): Unavailable, ResourceExhausted, Aborted,
// DeadlineExceeded, Internal and Unknown. Recorded, such an answer would be
// replayed to the very retry it asks for, for the whole TTL. Canceled is not
// recorded either: it is what a handler returns when its caller went away,
// and the caller's retry must run, not learn that it had left.
func DefaultRecordCode(c codes.Code) bool {
	switch c {
	case codes.Canceled, codes.Unavailable, codes.ResourceExhausted, codes.Aborted, codes.DeadlineExceeded, codes.Internal, codes.Unknown:
		return false
	}
	return true
}

// Option configures an Interceptor. Options are checked by New, which
// returns every invalid one as an *storekit.OptionError (matching
// idem.ErrInvalidOption), joined.
type Option func(*config)

type config struct {
	principal  func(context.Context) (string, error)
	methods    map[string]bool // nil: every unary method
	required   bool
	recordCode func(codes.Code) bool
	guardOpts  []idem.Option
	errs       []error
}

func (c *config) invalid(option, reason string) {
	c.errs = append(c.errs, &storekit.OptionError{Option: "idemgrpc." + option, Reason: reason})
}

// WithPrincipal sets the function that names who is calling (the
// authenticated peer, an API key, an account id), read from the call's
// context (metadata, peer credentials, or a value an authentication
// interceptor in front stored there). Keys are scoped by it: the same key
// sent by two principals names two independent calls, so one caller can
// never receive another's response. A function that returns an error, or
// an empty name, makes the call fail with Unauthenticated, the handler not
// run. Without this option every caller shares one key space per method.
func WithPrincipal(principal func(ctx context.Context) (string, error)) Option {
	return func(c *config) {
		if principal == nil {
			c.invalid("WithPrincipal", "function is nil")
		}
		c.principal = principal
	}
}

// WithMethods restricts the guarded methods to those named, by full method
// name ("/payments.v1.Payments/Create", as grpc.UnaryServerInfo.FullMethod
// spells it). Calls of other methods pass through untouched, key or not.
// By default every unary method whose request carries a key is guarded.
func WithMethods(fullMethods ...string) Option {
	return func(c *config) {
		if len(fullMethods) == 0 {
			c.invalid("WithMethods", "no methods")
			return
		}
		c.methods = make(map[string]bool, len(fullMethods))
		for _, m := range fullMethods {
			if !validFullMethod(m) {
				c.invalid("WithMethods", "\""+m+"\" is not a full method name of the form /package.Service/Method")
				continue
			}
			c.methods[m] = true
		}
	}
}

// validFullMethod reports whether m looks like "/service/method": a
// leading slash, one more slash, both parts non-empty and free of spaces.
func validFullMethod(m string) bool {
	rest, ok := strings.CutPrefix(m, "/")
	if !ok {
		return false
	}
	svc, method, ok := strings.Cut(rest, "/")
	if !ok || svc == "" || method == "" || strings.Contains(method, "/") {
		return false
	}
	return !strings.ContainsAny(m, " \t\r\n")
}

// WithRequired makes the key mandatory: a call of a guarded method without
// one fails with InvalidArgument, the handler not run. Without WithMethods
// every unary method is guarded, so every unary call (health checks and
// reads included) then needs a key: name the methods to guard.
func WithRequired() Option {
	return func(c *config) { c.required = true }
}

// WithRecordCode sets which status codes are recorded and replayed (OK is
// always recorded). The default is DefaultRecordCode. A call whose code is
// not recorded releases its claim: the next call with the key runs the
// handler again, as the client's retry of that code expects.
func WithRecordCode(record func(codes.Code) bool) Option {
	return func(c *config) {
		if record == nil {
			c.invalid("WithRecordCode", "function is nil")
		}
		c.recordCode = record
	}
}

// WithGuard passes options to the idem Guard underneath: TTL, takeover
// threshold, heartbeat, secret, namespace, observer, local cache, and the
// duplicate policy (idem.OnDuplicate(idem.Wait) makes a call that finds its
// key in progress wait for the first call's outcome, bounded by its own
// deadline, instead of failing with Aborted). The failure policy must stay
// at its default, idem.Unlock: the interceptor releases the claim of a call
// it does not record, so New refuses idem.OnFailure(idem.Lock) (to replay
// a failing code, use WithRecordCode). The interceptor encodes its records
// itself: an idem.WithCodec or idem.WithSanitize given here is overridden
// or refused by idem.New.
func WithGuard(opts ...idem.Option) Option {
	return func(c *config) { c.guardOpts = append(c.guardOpts, opts...) }
}
