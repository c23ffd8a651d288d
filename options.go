package idem

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/idem-go/idem/storekit"
)

// DuplicatePolicy says what a call gets when its key was already claimed.
// Its value is the policy's name.
type DuplicatePolicy string

// Duplicate policies.
const (
	// Return (default): a completed key returns its stored result; a key in
	// progress returns ErrInProgress.
	Return DuplicatePolicy = "return"
	// Raise: any duplicate returns an error matching ErrDuplicate (and
	// ErrInProgress while the first call runs).
	Raise DuplicatePolicy = "raise"
	// Wait: a duplicate of a call in progress blocks until that call
	// completes, fails, is released or goes stale, then decides again. The
	// caller's context bounds the wait.
	Wait DuplicatePolicy = "wait"
)

// FailurePolicy says what happens to the claim when fn returns an error.
// Its value is the policy's name.
type FailurePolicy string

// Failure policies.
const (
	// Unlock (default): the claim is released and the next call runs fn.
	Unlock FailurePolicy = "unlock"
	// Lock: the failure is stored; later calls get ErrPreviousFailure with
	// the stored message until the record expires. A context error
	// returned after fn's context was cancelled (its caller gave up) is
	// not stored: the claim is released, as under Unlock.
	Lock FailurePolicy = "lock"
)

// Codec encodes results for storage. The default encodes with
// encoding/json.
type Codec interface {
	Marshal(v any) ([]byte, error)
	Unmarshal(data []byte, v any) error
}

// jsonCodec is the default Codec.
type jsonCodec struct{}

func (jsonCodec) Marshal(v any) ([]byte, error)      { return json.Marshal(v) }
func (jsonCodec) Unmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

// Option configures a Guard. Options are checked by New, which returns an
// error matching ErrInvalidOption for any that does not make sense.
type Option func(*config)

type config struct {
	ttl           time.Duration
	dup           DuplicatePolicy
	fail          FailurePolicy
	heartbeat     time.Duration
	takeoverAfter time.Duration
	tenant, scope string
	secret        []byte
	previous      [][]byte // WithSecret's previous secrets, newest first
	secretSet     bool
	requireSecret bool
	observer      Observer
	logger        Observer // WithLogger's
	codec         Codec
	sanitize      any
	errorType     func(error) string
	cacheEntries  int
	cacheMaxAge   time.Duration
	instance      string
	errs          []error
}

func (c *config) invalid(option, format string, args ...any) {
	c.errs = append(c.errs, &storekit.OptionError{Option: option, Reason: fmt.Sprintf(format, args...)})
}

// Defaults used when an option is not given.
const (
	defaultTTL           = 24 * time.Hour
	defaultTakeoverAfter = 30 * time.Second
	defaultHeartbeat     = 5 * time.Second
)

// WithTTL sets how long a completed (or failed, under Lock) record is kept
// and replayed. Default 24h; at least 1ms, since records keep times in
// milliseconds.
func WithTTL(d time.Duration) Option {
	return func(c *config) {
		if d < time.Millisecond {
			c.invalid("WithTTL", "ttl must be at least 1ms (records keep times in milliseconds), got %v", d)
		}
		c.ttl = d
	}
}

// OnDuplicate sets the duplicate policy: Return (default), Raise or Wait.
func OnDuplicate(p DuplicatePolicy) Option {
	return func(c *config) {
		if p != Return && p != Raise && p != Wait {
			c.invalid("OnDuplicate", "unknown policy %q", string(p))
		}
		c.dup = p
	}
}

// OnFailure sets the failure policy: Unlock (default) or Lock.
func OnFailure(p FailurePolicy) Option {
	return func(c *config) {
		if p != Unlock && p != Lock {
			c.invalid("OnFailure", "unknown policy %q", string(p))
		}
		c.fail = p
	}
}

// maxThreshold is the longest takeover threshold (WithTakeoverAfter) and
// heartbeat interval (WithHeartbeat) a Guard accepts, about 73 years: a
// claim's lease is twice the threshold, and sums of them must not wrap.
const maxThreshold = time.Duration(math.MaxInt64 / 4)

// WithHeartbeat sets how often the owner of a claim refreshes it while fn
// runs: positive, at most half the takeover threshold and at most about 73
// years. Default 5s, or a third of the threshold if that is shorter.
func WithHeartbeat(d time.Duration) Option {
	return func(c *config) {
		switch {
		case d <= 0:
			c.invalid("WithHeartbeat", "interval must be positive, got %v", d)
		case d > maxThreshold:
			c.invalid("WithHeartbeat", "interval must be at most %v (and half the takeover threshold), got %v", maxThreshold, d)
		}
		c.heartbeat = d
	}
}

// WithTakeoverAfter sets the heartbeat age after which an in-progress claim
// is stale and may be taken over. Default 30s; at least 1ms (records keep
// milliseconds), at most about 73 years. It is stored with each claim, so a
// Guard with a shorter one never takes over a live claim of a longer one.
func WithTakeoverAfter(d time.Duration) Option {
	return func(c *config) {
		switch {
		case d < time.Millisecond:
			c.invalid("WithTakeoverAfter", "threshold must be at least 1ms (records keep times in milliseconds), got %v", d)
		case d > maxThreshold:
			c.invalid("WithTakeoverAfter", "threshold must be at most %v (a claim's lease is twice it), got %v", maxThreshold, d)
		}
		c.takeoverAfter = d
	}
}

// WithNamespace sets the tenant and scope mixed into every storage key, so
// the same caller key in two tenants or two operations never collides.
func WithNamespace(tenant, scope string) Option {
	return func(c *config) { c.tenant, c.scope = tenant, scope }
}

// WithInstanceID names this process with an identity that stays the same
// across its restarts and that no other live process uses at the same time
// (a pod name, a host name with a slot number): the user's promise. A
// claim left in progress by an earlier incarnation of the same identity
// (the process crashed and was started again) is known dead, and is taken
// over at once instead of after the takeover threshold, on every store.
// Two live processes given the same identity would take each other's
// claims: fn would still not run under two live claims at once (the
// nonce refuses the older one's writes and cancels its fn), but it could
// run twice. id must be 1 to 128 printable ASCII bytes, without '/'.
func WithInstanceID(id string) Option {
	return func(c *config) {
		if len(id) == 0 || len(id) > 128 {
			c.invalid("WithInstanceID", "id must be 1 to 128 bytes, got %d", len(id))
		}
		for i := 0; i < len(id); i++ {
			if id[i] <= ' ' || id[i] > '~' || id[i] == '/' {
				c.invalid("WithInstanceID", "id holds %q at byte %d: printable ASCII without '/' or spaces only", id[i], i)
				break
			}
		}
		c.instance = id
	}
}

// minSecretLen is the shortest secret WithSecret accepts: 16 bytes, 128
// bits of HMAC key.
const minSecretLen = 16

// WithSecret derives storage keys and payload hashes with HMAC-SHA256 under
// active, so nobody without it can guess a storage key from a caller key.
// previous are secrets being rotated out: a call that finds no record under
// active looks under each of them before it runs fn (two more round trips
// each) and answers from a record found there. Rotate in three deploys:
// WithSecret(old, new), WithSecret(new, old), then, once the TTL has
// passed, WithSecret(new) (see docs/guarantees.md). A secret shorter than
// 16 bytes, or a previous one equal to another, is an error.
func WithSecret(active []byte, previous ...[]byte) Option {
	return func(c *config) {
		switch {
		case len(active) == 0:
			c.invalid("WithSecret", "secret is empty")
		case len(active) < minSecretLen:
			c.invalid("WithSecret", "secret is %d bytes, want at least %d (an HMAC key under 128 bits is guessable)", len(active), minSecretLen)
		}
		c.secret = append([]byte(nil), active...)
		c.previous = nil
		for i, p := range previous {
			switch {
			case len(p) == 0:
				c.invalid("WithSecret", "previous secret %d is empty", i+1)
				continue
			case len(p) < minSecretLen:
				c.invalid("WithSecret", "previous secret %d is %d bytes, want at least %d (an HMAC key under 128 bits is guessable)", i+1, len(p), minSecretLen)
				continue
			case string(p) == string(active):
				c.invalid("WithSecret", "previous secret %d is the active secret", i+1)
				continue
			}
			for _, q := range c.previous {
				if string(p) == string(q) {
					c.invalid("WithSecret", "previous secret %d is given twice", i+1)
				}
			}
			c.previous = append(c.previous, append([]byte(nil), p...))
		}
		c.secretSet = true
	}
}

// RequireSecret is production mode: New fails unless WithSecret is given
// too, so a deployment that forgot its secret fails at start-up.
func RequireSecret() Option {
	return func(c *config) { c.requireSecret = true }
}

// WithObserver sends every Event to o.
func WithObserver(o Observer) Option {
	return func(c *config) {
		if o == nil {
			c.invalid("WithObserver", "observer is nil")
		}
		c.observer = o
	}
}

// WithLogger logs every Event to l (claims, hits and waits at Debug,
// takeovers and failures at Info and Warn), besides sending it to
// WithObserver's observer, if there is one.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.invalid("WithLogger", "logger is nil")
			return
		}
		c.logger = logObserver(l)
	}
}

// WithCodec sets how results are encoded for storage. Default: encoding/json.
func WithCodec(codec Codec) Option {
	return func(c *config) {
		if codec == nil {
			c.invalid("WithCodec", "codec is nil")
		}
		c.codec = codec
	}
}

// WithSanitize sets what is stored for replays: the first caller gets fn's
// full result, every replay (and same-process duplicate) gets only
// sanitize(result). T must be the Guard's result type, or New fails.
func WithSanitize[T any](sanitize func(T) T) Option {
	return func(c *config) {
		if sanitize == nil {
			c.invalid("WithSanitize", "function is nil")
		}
		c.sanitize = sanitize
	}
}

// WithErrorType sets how a failure's type name is stored under
// OnFailure(Lock). Default: the error's Go type, like "*fs.PathError".
func WithErrorType(name func(error) string) Option {
	return func(c *config) {
		if name == nil {
			c.invalid("WithErrorType", "function is nil")
		}
		c.errorType = name
	}
}

// WithLocalCache keeps up to entries recently read completed and failed
// outcomes in process memory, so replaying them costs no store round trip.
// An entry is served until the record's expiry or maxAge after it was
// read, whichever comes first: a record deleted or changed in another
// process can still be replayed for up to maxAge. entries and maxAge must
// be positive.
func WithLocalCache(entries int, maxAge time.Duration) Option {
	return func(c *config) {
		if entries < 1 {
			c.invalid("WithLocalCache", "entries must be at least 1, got %d", entries)
		}
		if maxAge <= 0 {
			c.invalid("WithLocalCache", "maxAge must be positive, got %v", maxAge)
		}
		c.cacheEntries, c.cacheMaxAge = entries, maxAge
	}
}

// CallOption configures one call of Guard.Do.
type CallOption func(*callConfig)

type callConfig struct {
	payload    any
	hasPayload bool
}

// Payload names the inputs of a call whose canonical hash must match on
// replay: a later call with the same key and another payload gets
// ErrPayloadMismatch, and a call without one matches only records stored
// without one. Values that encode to the same canonical JSON are the same
// payload (1 and 1.0); one JSON cannot encode is ErrInvalidPayload.
func Payload(v any) CallOption {
	return func(c *callConfig) { c.payload, c.hasPayload = v, true }
}
