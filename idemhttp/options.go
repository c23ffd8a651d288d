package idemhttp

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

// Defaults used when an option is not given.
const (
	// DefaultHeaderName is the request header that carries the key.
	DefaultHeaderName = "Idempotency-Key"
	// DefaultMaxBody is the largest request body read (1 MiB).
	DefaultMaxBody = 1 << 20
	// DefaultMaxRecordedBody is the largest response (body and headers)
	// recorded for replays (256 KiB, so that the record fits every store,
	// DynamoDB's 400 KB items included).
	DefaultMaxRecordedBody = 256 << 10
	// MaxKeyLen is the longest key accepted, in bytes (the unquoted value).
	MaxKeyLen = 255
)

// DefaultRecordStatus is the default of WithRecordStatus: every status below
// 500 is recorded but 408 Request Timeout, 425 Too Early and 429 Too Many
// Requests, which tell the client to retry the same request (recorded, they
// would be replayed to that retry for the whole TTL).
func DefaultRecordStatus(status int) bool {
	switch status {
	case http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests:
		return false
	}
	return status < 500
}

// Option configures a Middleware. Options are checked by New, which returns
// an error matching idem.ErrInvalidOption for any that does not make sense.
type Option func(*config)

type config struct {
	principal       func(*http.Request) (string, error)
	required        bool
	methods         map[string]bool
	fpHeaders       []string
	recordStatus    func(int) bool
	maxBody         int64
	maxRecordedBody int64
	headerName      string
	replayCookies   bool
	replayHeader    func(name string) bool
	skip            func(*http.Request) bool
	guardOpts       []idem.Option
	errs            []error
}

func (c *config) invalid(option, format string, args ...any) {
	c.errs = append(c.errs, &storekit.OptionError{Option: "idemhttp." + option, Reason: fmt.Sprintf(format, args...)})
}

// WithPrincipal sets the function that names who is asking (an API key, a
// user or account id). Keys are scoped by it: the same Idempotency-Key sent
// by two principals names two independent operations, so one client can
// never replay another's response. A function that returns an error, or
// an empty name, makes the request a 401 problem, with the handler not run
// (an empty name would put every caller the function cannot name in one
// key space; name anonymous callers explicitly if they are to share one). Without this option
// every caller shares one key space; use it whenever the API has more than
// one client.
//
// RFC 9110 wants a 401 to carry a WWW-Authenticate challenge, whose scheme
// the middleware cannot know: it keeps one already set on the response
// (by a handler in front of it), and otherwise sends none. Authenticate in
// front of the middleware, so that the principal function only reads what
// authentication found and its error is the rare case.
func WithPrincipal(principal func(*http.Request) (string, error)) Option {
	return func(c *config) {
		if principal == nil {
			c.invalid("WithPrincipal", "function is nil")
		}
		c.principal = principal
	}
}

// WithRequired makes the key mandatory for the guarded methods: a request
// without one is a 400 problem, with the handler not run. By default a
// request without a key passes through unguarded.
func WithRequired() Option {
	return func(c *config) { c.required = true }
}

// WithMethods sets the methods that are guarded (default POST and PATCH).
// Requests with other methods pass through untouched. A request's method
// is matched in any case: HTTP methods are case-sensitive, so "post" is
// not POST, but a handler may still act on it, and a guarded route never
// runs a side effect unguarded because of a method's spelling. Such a
// request is guarded as a request of its own (its fingerprint has the
// method as sent: "post" and "POST" with one key are a 422). A standard
// method given in another case ("post") is refused: write it as
// clients do.
func WithMethods(methods ...string) Option {
	return func(c *config) {
		if len(methods) == 0 {
			c.invalid("WithMethods", "no methods")
			return
		}
		c.methods = make(map[string]bool, len(methods))
		for _, m := range methods {
			if !isToken(m) {
				c.invalid("WithMethods", "%q is not a method name", m)
			} else if u := strings.ToUpper(m); u != m && standardMethods[u] {
				c.invalid("WithMethods", "%q is not %q: standard methods are spelled in upper case", m, u)
			}
			c.methods[strings.ToUpper(m)] = true // matched in any case
		}
	}
}

// WithSkip sets a function that picks requests to leave alone: a request
// for which skip returns true passes through to the handler untouched,
// before anything else is looked at (method, key, body), as a request
// with an unguarded method does. skip must not read the request body.
func WithSkip(skip func(*http.Request) bool) Option {
	return func(c *config) {
		if skip == nil {
			c.invalid("WithSkip", "function is nil")
		}
		c.skip = skip
	}
}

// WithFingerprintHeaders adds the named request headers to the request
// fingerprint: a replay whose values for them differ is a 422 problem, as a
// different body is. Names are case-insensitive. "Host" is the request's
// host (http.Request.Host, where net/http moves the header to);
// "Transfer-Encoding", which net/http removes, is refused.
func WithFingerprintHeaders(names ...string) Option {
	return func(c *config) {
		for _, n := range names {
			if !isToken(n) {
				c.invalid("WithFingerprintHeaders", "%q is not a header name", n)
				continue
			}
			if strings.EqualFold(n, "Transfer-Encoding") {
				// net/http takes it out of a server request's headers (it
				// describes the message framing, not the request).
				c.invalid("WithFingerprintHeaders", "%q never reaches a handler's request headers", n)
				continue
			}
			c.fpHeaders = append(c.fpHeaders, http.CanonicalHeaderKey(n))
		}
	}
}

// WithRecordStatus sets which response statuses are recorded and replayed.
// The default, DefaultRecordStatus, records every status below 500 but 408,
// 425 and 429: a 5xx is not recorded, nor is an answer that asks the client
// to send the same request again later; its claim is released, and the
// client's retry runs the handler again. A status that is not recorded
// always releases the claim.
func WithRecordStatus(record func(status int) bool) Option {
	return func(c *config) {
		if record == nil {
			c.invalid("WithRecordStatus", "function is nil")
		}
		c.recordStatus = record
	}
}

// WithMaxBody sets the largest request body read, in bytes (default
// DefaultMaxBody). A longer body is a 413 problem, with the handler not
// run.
func WithMaxBody(n int64) Option {
	return func(c *config) {
		if n <= 0 {
			c.invalid("WithMaxBody", "limit must be positive, got %d", n)
		}
		c.maxBody = n
	}
}

// WithMaxRecordedBody sets the largest response recorded for replays, in
// bytes: its body and the headers it was sent with, counted as on the wire
// (default DefaultMaxRecordedBody). A larger response is still served in
// full to the first caller; its replays get a 409 problem of type
// ProblemResponseNotRecorded, never a truncated body. The limit keeps every
// record within what the store accepts: a record the store refuses leaves
// the key claimed until the Guard's takeover threshold.
func WithMaxRecordedBody(n int64) Option {
	return func(c *config) {
		if n <= 0 {
			c.invalid("WithMaxRecordedBody", "limit must be positive, got %d", n)
		}
		c.maxRecordedBody = n
	}
}

// WithHeaderName sets the request header that carries the key (default
// "Idempotency-Key").
func WithHeaderName(name string) Option {
	return func(c *config) {
		if !isToken(name) {
			c.invalid("WithHeaderName", "%q is not a header name", name)
		}
		c.headerName = http.CanonicalHeaderKey(name)
	}
}

// WithReplaySetCookie records Set-Cookie response headers and replays
// them. By default they are dropped from the record (a session cookie is
// meant for one response, and a record outlives it). Only this option
// records them: the function of WithReplayHeaders is not asked about
// Set-Cookie.
func WithReplaySetCookie() Option {
	return func(c *config) { c.replayCookies = true }
}

// WithReplayHeaders sets which of the headers the handler set are
// recorded and replayed: keep is called with each header's name (as the
// handler's header map holds it: canonical, when set with Header.Set or
// Header.Add) and reports whether to record it. The default,
// DefaultReplayHeaders, records all but those that name one response
// (its date, request and trace ids). Whatever keep says, hop-by-hop
// headers, trailers and Idempotent-Replayed are never recorded, and
// Set-Cookie only with WithReplaySetCookie; a header the handler removed
// (deleted, or set without a value, as h["Date"] = nil keeps net/http from
// sending one) is recorded as removed, and removed on replays. To drop a header of your own
// beside the defaults:
//
//	idemhttp.WithReplayHeaders(func(name string) bool {
//		return name != "X-Served-By" && idemhttp.DefaultReplayHeaders(name)
//	})
func WithReplayHeaders(keep func(name string) bool) Option {
	return func(c *config) {
		if keep == nil {
			c.invalid("WithReplayHeaders", "function is nil")
		}
		c.replayHeader = keep
	}
}

// perResponse are the headers DefaultReplayHeaders does not record:
// canonical names.
var perResponse = map[string]bool{
	"Date":                  true,
	"Age":                   true,
	"Server-Timing":         true,
	"X-Request-Id":          true,
	"Request-Id":            true,
	"X-Correlation-Id":      true,
	"Correlation-Id":        true,
	"X-Trace-Id":            true,
	"Traceparent":           true,
	"Tracestate":            true,
	"X-Amzn-Trace-Id":       true,
	"X-Cloud-Trace-Context": true,
}

// DefaultReplayHeaders is the default of WithReplayHeaders: it records
// every header but those that describe one response rather than the
// operation's outcome: Date and Age (a replay gets the server's own Date,
// as any response does), Server-Timing, and request and trace ids
// (X-Request-Id, Request-Id, X-Correlation-Id, Correlation-Id, X-Trace-Id,
// Traceparent, Tracestate, X-Amzn-Trace-Id, X-Cloud-Trace-Context). Names
// are matched in any case.
func DefaultReplayHeaders(name string) bool {
	return !perResponse[http.CanonicalHeaderKey(name)]
}

// WithGuard passes options to the idem Guard underneath: TTL, takeover
// threshold, heartbeat, secret, namespace, observer, and the duplicate
// policy (idem.OnDuplicate(idem.Wait) makes a request that finds its key in
// progress wait for the first one's response, bounded by its own context,
// instead of getting a 409). The failure policy must stay at its default
// (idem.Unlock): the middleware uses it to release the claim of a response
// it does not record, so New refuses idem.OnFailure(idem.Lock) (to replay
// 5xx responses instead, use WithRecordStatus). Recorded responses have a
// versioned format of the middleware's own: an idem.WithCodec given here
// is overridden.
func WithGuard(opts ...idem.Option) Option {
	return func(c *config) { c.guardOpts = append(c.guardOpts, opts...) }
}

// standardMethods are the methods of RFC 9110 and RFC 5789 (PATCH).
var standardMethods = map[string]bool{
	http.MethodGet: true, http.MethodHead: true, http.MethodPost: true, http.MethodPut: true, http.MethodPatch: true,
	http.MethodDelete: true, http.MethodConnect: true, http.MethodOptions: true, http.MethodTrace: true,
}

// isToken reports whether s is a non-empty RFC 9110 token.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isTchar(s[i]) {
			return false
		}
	}
	return true
}

func isTchar(b byte) bool {
	switch {
	case b >= 'a' && b <= 'z', b >= 'A' && b <= 'Z', b >= '0' && b <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", b) >= 0
}
