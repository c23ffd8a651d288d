package storetest

import (
	"sync"
	"time"
)

// Clock is a settable clock for Harness.NewStoreWithClock: hand its Now to the store
// under test (memstore.WithClock(clock.Now), and the like), and the suite
// moves it forward instead of sleeping. It is safe for concurrent use.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// NewClock returns a Clock set to the current time, truncated to the
// millisecond, as records keep it.
func NewClock() *Clock { return &Clock{now: time.Now().Truncate(time.Millisecond)} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
