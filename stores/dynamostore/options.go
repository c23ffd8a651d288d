package dynamostore

import (
	"fmt"
	"time"

	"github.com/idem-go/idem"
)

// Defaults of the options.
const (
	DefaultPartitionKey  = "pk"
	DefaultSortKey       = "sk"
	DefaultSortKeyValue  = "IDEM"
	DefaultRetention     = time.Minute
	maxPartitionKeyBytes = 2048
)

// Option configures a Store. Options are checked when the store is first
// used (or by Validate); a mistake is an *OptionError matching
// idem.ErrInvalidOption.
type Option func(*config)

type config struct {
	pk, sk    string
	skValue   string
	prefix    string
	retention time.Duration
	now       func() time.Time
	err       error
}

func defaultConfig() config {
	return config{
		pk: DefaultPartitionKey, sk: DefaultSortKey, skValue: DefaultSortKeyValue,
		retention: DefaultRetention, now: time.Now,
	}
}

// OptionError says which option was invalid and why. It matches
// idem.ErrInvalidOption.
type OptionError struct {
	Option string
	Reason string
}

func (e *OptionError) Error() string {
	return fmt.Sprintf("dynamostore: invalid option %s: %s", e.Option, e.Reason)
}

// Is makes an OptionError match idem.ErrInvalidOption.
func (e *OptionError) Is(target error) bool { return target == idem.ErrInvalidOption }

func (c *config) fail(option, reason string) {
	if c.err == nil {
		c.err = &OptionError{Option: option, Reason: reason}
	}
}

// WithKeyAttributes names the table's partition key and sort key
// attributes (default "pk" and "sk"). An empty sort key name means the
// table has a partition key only.
func WithKeyAttributes(partitionKey, sortKey string) Option {
	return func(c *config) {
		switch {
		case partitionKey == "":
			c.fail("WithKeyAttributes", "empty partition key name")
		case partitionKey == sortKey:
			c.fail("WithKeyAttributes", "partition and sort key have the same name")
		case recordAttrs[partitionKey]:
			c.fail("WithKeyAttributes", fmt.Sprintf("partition key name %q is a record attribute", partitionKey))
		case recordAttrs[sortKey]:
			c.fail("WithKeyAttributes", fmt.Sprintf("sort key name %q is a record attribute", sortKey))
		}
		c.pk, c.sk = partitionKey, sortKey
	}
}

// WithSortKeyValue sets the sort key value of every record (default
// "IDEM"). It is ignored for a table without a sort key.
func WithSortKeyValue(v string) Option {
	return func(c *config) {
		if v == "" {
			c.fail("WithSortKeyValue", "empty sort key value")
		}
		c.skValue = v
	}
}

// WithKeyPrefix puts prefix in front of the storage key in the partition
// key value, e.g. "IDEM#" or a per-tenant prefix.
func WithKeyPrefix(prefix string) Option {
	return func(c *config) {
		if len(prefix) >= maxPartitionKeyBytes {
			c.fail("WithKeyPrefix", "prefix leaves no room for the key")
		}
		c.prefix = prefix
	}
}

// WithRetention sets how long past its expiry an item is kept before
// DynamoDB's TTL may delete it (default one minute; the ttl attribute is
// expires_at plus the retention, in epoch seconds). It must not be
// negative.
func WithRetention(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.fail("WithRetention", "negative retention")
		}
		c.retention = d
	}
}

// WithClock sets the clock the store decides expiry and staleness with
// (default time.Now): tests use it to move time, and users with a trusted
// time source to replace the host's. Every caller on one table should read
// the same time; the package documentation (Time) says how much skew the
// takeover threshold tolerates: less than threshold - heartbeat interval -
// heartbeat latency.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		if now == nil {
			c.fail("WithClock", "nil clock")
		}
		c.now = now
	}
}
