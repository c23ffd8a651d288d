package storekit

import (
	"errors"
	"fmt"
	"time"
)

// Options is what the options of every store have in common: the rejected
// options, collected the one way every constructor of this repository
// reports them (each an *OptionError matching ErrInvalidOption,
// all of them joined), and the clock and retention of the stores that
// decide with the caller's clock. A store's option struct embeds it; its
// options call Invalid, SetClock and SetRetention; its New returns Err.
// The isr tables, Coordinator, Handler and body stores collect their
// options with it too.
type Options struct {
	// Store is the store's package name ("memstore"): option names in
	// errors are qualified with it ("memstore.WithRetention").
	Store string
	// Now is the store's clock (WithClock).
	Now func() time.Time
	// Retention is how long past its ExpiresAt a record is kept
	// (WithRetention).
	Retention time.Duration
	// Cleanup is how often the store removes expired records by itself
	// (WithCleanup); the store sets its default before applying options.
	Cleanup time.Duration
	// NoCleanup is set by WithoutCleanup: the store runs no clean-up of
	// its own, and its user calls Purge.
	NoCleanup bool

	errs []error
}

// Invalid records that option (a name in the store's package, such as
// "WithRetention" or "New") was rejected, and why.
func (o *Options) Invalid(option, format string, args ...any) {
	if o.Store != "" {
		option = o.Store + "." + option
	}
	o.errs = append(o.errs, &OptionError{Option: option, Reason: fmt.Sprintf(format, args...)})
}

// SetClock is the rule of a store's WithClock option: a nil clock is
// rejected.
func (o *Options) SetClock(now func() time.Time) {
	if now == nil {
		o.Invalid("WithClock", "clock is nil")
		return
	}
	o.Now = now
}

// SetRetention is the rule of a store's WithRetention option: a negative
// retention is rejected.
func (o *Options) SetRetention(d time.Duration) {
	if d < 0 {
		o.Invalid("WithRetention", "retention must not be negative, got %v", d)
		return
	}
	o.Retention = d
}

// Err returns every rejected option, joined, or nil.
func (o *Options) Err() error { return errors.Join(o.errs...) }
