package isr

import (
	"log/slog"
	"time"

	"github.com/idem-go/idem/storekit"
)

// TableOption configures a FileTable or a MemoryTable, the tables isr
// keeps itself (a DynamoDB or Redis table has its items removed by the
// server). NewFileTable and NewMemoryTable report every invalid option as
// an *storekit.OptionError matching idem.ErrInvalidOption.
type TableOption func(*tableConfig)

// FileOption is the TableOption of NewFileTable.
type FileOption = TableOption

type tableConfig struct {
	storekit.Options // Now, Cleanup, NoCleanup
	sync             bool
	syncSet          bool         // WithoutFileSync given
	logger           *slog.Logger // WithTableLogger; nil: slog.Default()
}

// DefaultTableCleanup is about how often an open FileTable or MemoryTable
// removes its expired items (each wait is jittered by ±50%).
const DefaultTableCleanup = time.Minute

func newTableConfig() tableConfig {
	return tableConfig{Options: storekit.Options{Store: "isr", Now: time.Now, Cleanup: DefaultTableCleanup}, sync: true}
}

// apply applies opts, rejecting nil options, as constructor.
func (c *tableConfig) apply(constructor string, opts []TableOption) {
	for _, o := range opts {
		if o == nil {
			c.Invalid(constructor, "nil option")
			continue
		}
		o(c)
	}
}

// WithoutFileSync skips the fsync of each written item and of its
// directory: faster, but a machine crash can lose or tear recent writes.
// For tests and throwaway caches only. A FileTable option: NewMemoryTable
// rejects it.
func WithoutFileSync() FileOption {
	return func(c *tableConfig) { c.sync, c.syncSet = false, true }
}

// WithCleanup makes the table remove its expired items by itself about
// every d (each wait drawn from [d/2, 3d/2)) until Close; the default is
// DefaultTableCleanup. d must be positive. It overrides an earlier
// WithoutCleanup. See Lifecycle in docs/isr.md for what expired
// means.
func WithCleanup(every time.Duration) TableOption {
	return func(c *tableConfig) { c.SetCleanup(every) }
}

// WithoutCleanup runs no clean-up goroutine: expired items stay until the
// table's Purge is called (for users who run it from a job of their own).
// It overrides an earlier WithCleanup.
func WithoutCleanup() TableOption {
	return func(c *tableConfig) { c.SetNoCleanup() }
}

// WithTableClock sets the clock by which the table's clean-up and Purge
// judge an item expired (default time.Now). Every operation still decides
// with the caller's Now; the clean-up only removes items whose ttl has
// passed on this clock, so it must agree with the callers' clocks to well
// within the TTL buffer (WithTTLBuffer), as DynamoDB's and Redis's clocks
// must.
func WithTableClock(now func() time.Time) TableOption {
	return func(c *tableConfig) { c.SetClock(now) }
}

// WithTableLogger sets where a failed clean-up pass of the table is logged
// (at Warn, with the error); the default is slog.Default(). A nil logger
// is an invalid option.
func WithTableLogger(l *slog.Logger) TableOption {
	return func(c *tableConfig) {
		if l == nil {
			c.Invalid("WithTableLogger", "logger is nil")
			return
		}
		c.logger = l
	}
}
