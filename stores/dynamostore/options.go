package dynamostore

import (
	"time"

	"github.com/idem-go/idem/storekit"
)

// Defaults of the options.
const (
	DefaultPartitionKey  = "pk"
	DefaultSortKey       = "sk"
	DefaultSortKeyValue  = "IDEM"
	DefaultRetention     = time.Minute
	maxPartitionKeyBytes = 2048
)

// Option configures a Store. New (and CreateTable) check every option and
// report each invalid one as an *storekit.OptionError matching
// storekit.ErrInvalidOption.
type Option func(*config)

type config struct {
	storekit.Options // Now, Retention
	pk, sk           string
	skValue          string
	prefix           string
	oneRequest       bool // WithOneRequest
}

// newConfig checks the arguments of fn (New or CreateTable) and applies
// opts: every mistake is reported, joined.
func newConfig(fn string, client Client, table string, opts []Option) (config, error) {
	c := config{
		Options: storekit.Options{Store: "dynamostore", Now: time.Now, Retention: DefaultRetention},
		pk:      DefaultPartitionKey, sk: DefaultSortKey, skValue: DefaultSortKeyValue,
	}
	if client == nil {
		c.Invalid(fn, "client is nil")
	}
	if table == "" {
		c.Invalid(fn, "table name is empty")
	}
	for _, o := range opts {
		if o == nil {
			c.Invalid(fn, "nil option")
			continue
		}
		o(&c)
	}
	return c, c.Err()
}

// WithKeyAttributes names the table's partition key and sort key
// attributes (default "pk" and "sk"). An empty sort key name means the
// table has a partition key only.
func WithKeyAttributes(partitionKey, sortKey string) Option {
	return func(c *config) {
		switch {
		case partitionKey == "":
			c.Invalid("WithKeyAttributes", "partition key name is empty")
		case partitionKey == sortKey:
			c.Invalid("WithKeyAttributes", "partition and sort key have the same name")
		case recordAttrs[partitionKey]:
			c.Invalid("WithKeyAttributes", "partition key name %q is a record attribute", partitionKey)
		case recordAttrs[sortKey]:
			c.Invalid("WithKeyAttributes", "sort key name %q is a record attribute", sortKey)
		}
		c.pk, c.sk = partitionKey, sortKey
	}
}

// WithSortKeyValue sets the sort key value of every record (default
// "IDEM"). It is ignored for a table without a sort key.
func WithSortKeyValue(v string) Option {
	return func(c *config) {
		if v == "" {
			c.Invalid("WithSortKeyValue", "sort key value is empty")
		}
		c.skValue = v
	}
}

// WithKeyPrefix puts prefix in front of the storage key in the partition
// key value, e.g. "IDEM#" or a per-tenant prefix.
func WithKeyPrefix(prefix string) Option {
	return func(c *config) {
		if len(prefix) >= maxPartitionKeyBytes {
			c.Invalid("WithKeyPrefix", "prefix leaves no room for the key")
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
		c.SetRetention(d)
	}
}

// WithClock sets the clock the store decides expiry and staleness with
// (default time.Now): tests use it to move time, and users with a trusted
// time source to replace the host's. Every caller on one table should read
// the same time; docs/dynamostore.md (Time) says how much skew the
// takeover threshold tolerates: less than threshold - heartbeat interval -
// heartbeat latency.
func WithClock(now func() time.Time) Option {
	return func(c *config) {
		c.SetClock(now)
	}
}

// WithOneRequest makes DoTx send one request for a key that has no record:
// fn builds its items first, and they go in one TransactWriteItems with
// the Put of the key's completed record, conditioned on the key having no
// record (see onerequest.go). A duplicate is answered with the record
// that refused its Put (a replay, or "in progress"), also in one request,
// after fn built items that are not written; concurrent duplicates of a
// fresh key each run fn, and one commits. So fn must only build items:
// idem.Step inside it is refused (storekit.ErrInvalidOption), since two
// runs of fn may be live at once. A key with a record a claim may take
// (expired, released, stale) is claimed first, as without the option.
// Without it, DoTx claims the key first (two requests: the claim's
// PutItem and the transaction).
func WithOneRequest() Option {
	return func(c *config) { c.oneRequest = true }
}
