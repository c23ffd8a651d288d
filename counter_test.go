package idem_test

import (
	"context"
	"sync"

	"github.com/idem-go/idem"
)

// eventCounter is an Observer that counts events by kind.
type eventCounter struct {
	mu     sync.Mutex
	counts map[idem.EventKind]int64
}

func (c *eventCounter) Observe(_ context.Context, e idem.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = make(map[idem.EventKind]int64)
	}
	c.counts[e.Kind]++
}

// Count returns how many events of kind k were seen.
func (c *eventCounter) Count(k idem.EventKind) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[k]
}
