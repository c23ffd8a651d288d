package storekit

import (
	"context"
	"log/slog"
	"math"
	mathrand "math/rand/v2"
	"sync"
	"time"

	"github.com/idem-go/idem/lease"
)

// DefaultPurgeBatch is how many records a clean-up pass removes in one
// batch (one statement, one lock hold) before it lets claims through.
const DefaultPurgeBatch = 500

// MinCleanup is the shortest clean-up interval SetCleanup accepts: a
// shorter one would run passes back to back.
const MinCleanup = time.Millisecond

// SetCleanup is the rule of a store's WithCleanup option: the store cleans
// up by itself about every d; d must be at least MinCleanup. A huge d (up
// to math.MaxInt64) means rarely: the waits saturate, they never wrap.
func (o *Options) SetCleanup(d time.Duration) {
	if d < MinCleanup {
		o.Invalid("WithCleanup", "interval must be at least %v, got %v", MinCleanup, d)
		return
	}
	o.Cleanup = d
	o.NoCleanup = false
}

// SetNoCleanup is the rule of a store's WithoutCleanup option: the store
// runs no clean-up of its own; its user calls Purge.
func (o *Options) SetNoCleanup() { o.NoCleanup = true }

// Cleaner runs a store's clean-up pass in the background, about every
// interval, until Close. Each wait is drawn from [interval/2,
// interval*3/2), so processes that share one table, directory or bucket
// and were started together spread their passes instead of cleaning at
// once. A pass that fails is logged at Warn (the store's name and the
// error) to the logger given to StartCleaner, and tried again at the next
// interval: a clean-up never changes what a call sees, only how much the
// store holds.
//
// A nil *Cleaner is a cleaner that runs nothing; its Close returns nil.
type Cleaner struct {
	cancel context.CancelFunc
	done   chan struct{}
	once   sync.Once
}

// StartCleaner starts pass in a goroutine of its own, first after one
// jittered interval. A failed pass is logged to logger, the one a store's
// user gives with the store's WithLogger option; nil means slog.Default().
// The context pass gets ends when Close is called; a pass cut off by it
// returns at once and its error is not logged.
func StartCleaner(store string, interval time.Duration, logger *slog.Logger, pass func(ctx context.Context) error) *Cleaner {
	if logger == nil {
		logger = slog.Default()
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Cleaner{cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(c.done)
		for {
			wait := CleanupWait(interval)
			if err := lease.Sleep(ctx, wait); err != nil {
				return
			}
			if err := pass(ctx); err != nil && ctx.Err() == nil {
				logger.Warn("idem store clean-up failed; it runs again", "store", store, "err", err)
			}
		}
	}()
	return c
}

// CleanupWait draws one wait of a cleaner running about every interval,
// uniformly from [interval/2, interval*3/2), saturated at the largest
// time.Duration instead of wrapping: a huge interval means a long wait,
// never a short or negative one. An interval under MinCleanup is taken as
// MinCleanup.
func CleanupWait(interval time.Duration) time.Duration {
	interval = max(interval, MinCleanup)
	return AddDuration(interval/2, mathrand.N(interval))
}

// AddDuration returns a+b, saturated at the largest or smallest
// time.Duration where the sum would wrap. Stores add durations from
// options (retention, intervals, timeouts) with it.
func AddDuration(a, b time.Duration) time.Duration {
	switch {
	case b > 0 && a > math.MaxInt64-b:
		return math.MaxInt64
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64
	}
	return a + b
}

// ScaleDuration returns d*f, saturated at the largest or smallest
// time.Duration where the product is out of range; a NaN f gives 0.
func ScaleDuration(d time.Duration, f float64) time.Duration {
	p := float64(d) * f
	switch {
	case p != p:
		return 0
	case p >= math.MaxInt64:
		return math.MaxInt64
	case p <= math.MinInt64:
		return math.MinInt64
	}
	return time.Duration(p)
}

// Close stops the cleaner and waits for a pass in flight to return. It may
// be called more than once and always returns nil.
func (c *Cleaner) Close() error {
	if c == nil {
		return nil
	}
	c.once.Do(func() {
		c.cancel()
		<-c.done
	})
	return nil
}

// PurgeBatches calls batch until it removes fewer than limit records, ctx
// ends or batch fails, and returns how many it removed in all. A store's
// Purge is this over its one-batch removal: each batch holds its locks only
// for its own few records, so claims of other keys (and of the same key,
// between batches) go through while a large backlog is removed. A batch
// must remove only records expired past retention at the moment it removes
// them, judged by the store's own rule (Record's ExpiresAt on the
// store's clock).
func PurgeBatches(ctx context.Context, limit int, batch func(ctx context.Context, limit int) (int, error)) (int, error) {
	if limit <= 0 {
		limit = DefaultPurgeBatch
	}
	total := 0
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := batch(ctx, limit)
		total += n
		if err != nil {
			return total, err
		}
		if n < limit {
			return total, nil
		}
	}
}

// Pacer spaces a clean-up's work out, so that the calls beside it have
// the store (its locks, the server, the disk's journal, the CPU) most of
// the time instead of queueing behind a removal that runs back to back.
// Rest is called after each step of work: it sleeps Ratio times as long
// as the work since the previous Rest took, once at least Min of work has
// gathered (steps of microseconds add up to Min rather than each sleeping
// a timer's granularity). The first Rest only starts the count. The zero
// Pacer never sleeps.
type Pacer struct {
	Ratio float64       // sleep per unit of work
	Min   time.Duration // work gathered before a sleep
	start time.Time     // when the work since the last sleep began
}

// Rest sleeps after enough work (see Pacer). It returns ctx's cause if ctx
// ends during the sleep.
func (p *Pacer) Rest(ctx context.Context) error {
	now := time.Now()
	if p.start.IsZero() {
		p.start = now
		return nil
	}
	worked := now.Sub(p.start)
	if !(p.Ratio > 0) || worked < p.Min { // a NaN Ratio never sleeps either
		return nil
	}
	err := lease.Sleep(ctx, ScaleDuration(worked, p.Ratio))
	p.start = time.Now()
	return err
}
