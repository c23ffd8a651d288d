package natsstore

import (
	"time"

	"github.com/idem-go/idem/storekit"
)

// Option configures a Store. Options are checked by New, which reports
// every invalid one.
type Option func(*config)

type config struct{ storekit.Options }

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
// released ones alike) before Purge deletes them, so a key claimed again
// soon after goes on counting attempts and fencing tokens stay monotonic.
// Default one minute; negative is an invalid option.
func WithRetention(d time.Duration) Option {
	return func(c *config) {
		c.SetRetention(d)
	}
}

// BucketOption configures CreateBucket.
type BucketOption func(*bucketConfig)

type bucketConfig struct {
	storekit.Options
	replicas int
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
