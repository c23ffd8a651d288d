package natsstore

import (
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem/storekit"
)

// Option configures a Store. Options are checked by New, which reports
// every invalid one.
type Option func(*config)

type config struct {
	storekit.Options
	js     jetstream.JetStream
	conn   *nats.Conn
	logger *slog.Logger // nil: slog.Default()
}

// WithClock sets the store's clock (default time.Now), for tests and for
// users with a trusted time source. A nil clock is an invalid option.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		c.SetClock(now)
	}
}

// DefaultRetention is how long Purge keeps a record past its ExpiresAt.
const DefaultRetention = time.Minute

// WithRetention keeps records for d past their ExpiresAt (expired and
// released ones alike) before the clean-up or Purge removes them, so a key
// claimed again soon after goes on counting attempts and fencing tokens
// stay monotonic. Default one minute; negative is an invalid option.
func WithRetention(d time.Duration) Option {
	return func(c *config) {
		c.SetRetention(d)
	}
}

// DefaultCleanup is how often a Store removes expired records by itself
// when its bucket has no max age (see WithCleanup).
const DefaultCleanup = 5 * time.Minute

// WithCleanup sets how often the Store removes expired records by itself
// while it is open (default DefaultCleanup; each wait is drawn from
// [every/2, every*3/2)). A pass runs only when the bucket has no max age:
// on a bucket with one the server removes entries itself. Processes that
// share a bucket take turns through a lease entry in it (see the package
// doc). every must be at least a millisecond; a huge every means rarely.
func WithCleanup(every time.Duration) Option {
	return func(c *config) {
		c.SetCleanup(every)
	}
}

// WithoutCleanup runs no clean-up in the background: the user calls Purge
// from a job of their own, or the bucket has a max age.
func WithoutCleanup() Option {
	return func(c *config) {
		c.SetNoCleanup()
	}
}

// WithJetStream gives the Store the JetStream context of a bucket that was
// not made by CreateBucket (one opened with js.KeyValue), so that the
// clean-up reads no live record and removes expired records without
// leaving a delete marker per key: the Store writes each record by
// publishing it to the bucket's stream with its expiry in a header, from
// its first status read of the bucket on, and a pass reads the entries'
// headers only and deletes an expired record's message by its sequence
// (see Lifecycle in docs/natsstore.md). A bucket from CreateBucket carries it
// already. Without it the clean-up reads every record, and removes
// records with a KV purge, which leaves one marker per removed key in the
// stream. A nil js is an invalid option.
func WithJetStream(js jetstream.JetStream) Option {
	return func(c *config) {
		if js == nil { // jetstream.New hands back a nil interface with its error
			c.Invalid("WithJetStream", "nil JetStream")
			return
		}
		c.js = js
	}
}

// WithConn gives the Store the connection its presence uses: the
// subscription that tells other processes this one is alive, and the
// requests that tell it another process is gone (see Dead owners in
// docs/natsstore.md). By default the Store uses the connection of the
// JetStream context it has (CreateBucket's, or WithJetStream's); a bucket
// opened with js.KeyValue and given without either has no presence, and
// its claims are taken over after the takeover threshold only. A nil nc
// is an invalid option.
func WithConn(nc *nats.Conn) Option {
	return func(c *config) {
		if nc == nil {
			c.Invalid("WithConn", "nil connection")
			return
		}
		c.conn = nc
	}
}

// WithLogger sets where the clean-up logs (at Warn): a failed pass, with
// its error, and the one-time notice that it removes records with KV
// purges (see WithJetStream). The default is slog.Default(). A nil logger
// is an invalid option.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.Invalid("WithLogger", "logger is nil")
			return
		}
		c.logger = l
	}
}

// BucketOption configures CreateBucket.
type BucketOption func(*bucketConfig)

type bucketConfig struct {
	storekit.Options
	replicas int
	maxAge   time.Duration
}

// WithReplicas sets how many servers hold the bucket's stream (1 to 5,
// default 1 so that a single server works). With 3, a write is
// acknowledged once two servers hold it, and an acknowledged claim survives
// the loss of any one server.
func WithReplicas(n int) BucketOption {
	return func(c *bucketConfig) {
		if n < 1 || n > 5 {
			c.Invalid("WithReplicas", "%d replicas, want 1 to 5", n)
			return
		}
		c.replicas = n
	}
}

// WithMaxAge makes the server remove each entry d after its last write
// (the bucket's max age, jetstream.KeyValueConfig.TTL), and a Store on the
// bucket then runs no clean-up pass of its own. The server removes an entry
// d after its last write whatever the record's own expiry, so d must be at
// least the longest a record lives past a write: the Guards' claim
// lifetime (max(TTL, 2×takeover threshold); with the defaults, the 24h
// TTL) plus the store's retention (default one minute): 25h is safe for
// the defaults. A Store refuses a claim or a completion whose record
// would outlive d with a *MaxAgeError (matching storekit.ErrInvalidOption),
// before fn runs. d must be positive. Without WithMaxAge the bucket keeps
// entries until they are removed, and the Store cleans up by itself.
func WithMaxAge(d time.Duration) BucketOption {
	return func(c *bucketConfig) {
		if d <= 0 {
			c.Invalid("WithMaxAge", "max age must be positive, got %v", d)
			return
		}
		c.maxAge = d
	}
}
