package natsstore

import (
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem"
)

// Option configures a Store. Options are checked by New, which reports
// every invalid one.
type Option func(*config)

type config struct {
	now       func() time.Time
	retention time.Duration
	errs      []error
}

func (c *config) invalid(option, format string, args ...any) {
	c.errs = append(c.errs, &idem.OptionError{Option: "natsstore." + option, Reason: fmt.Sprintf(format, args...)})
}

func (c *config) err() error { return errors.Join(c.errs...) }

// WithClock sets the store's clock (default time.Now), for tests and for
// users with a trusted time source. A nil clock is an invalid option.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now == nil {
			c.invalid("WithClock", "nil clock")
			return
		}
		c.now = now
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
		if d < 0 {
			c.invalid("WithRetention", "negative retention %v", d)
			return
		}
		c.retention = d
	}
}

// BucketOption configures CreateBucket.
type BucketOption func(*bucketConfig)

type bucketConfig struct {
	replicas int
	errs     []error
}

// WithReplicas sets how many servers hold the bucket's stream (1 to 5,
// default 1 so that a single server works). With 3, a write is
// acknowledged once two servers hold it, and an acknowledged claim survives
// the loss of any one server.
func WithReplicas(n int) BucketOption {
	return func(c *bucketConfig) {
		if n < 1 || n > 5 {
			c.errs = append(c.errs, &idem.OptionError{Option: "natsstore.WithReplicas", Reason: fmt.Sprintf("%d replicas, want 1 to 5", n)})
			return
		}
		c.replicas = n
	}
}
