package idem

import (
	"container/list"
	"sync"
	"time"

	"github.com/idem-go/idem/storekit"
)

// localCache keeps recently read completed and failed records in process
// memory (WithLocalCache), so replaying them costs no store round trip. It
// is a plain LRU: a map to list elements, most recently used at the front,
// at most max entries, one mutex.
//
// Each entry has a local deadline, taken from the monotonic clock, past
// which it is never served: the time the store read was sent plus the least
// of maxAge, the record's remaining lifetime by the local clock
// (ExpiresAt - now) and the most it could have left by the clock that
// wrote it (ExpiresAt - CompletedAt, since the store's now was at least
// CompletedAt when it answered). A store deciding with a server clock that
// is ahead of the local one can so have an entry served for up to that
// skew past its expiry, but never longer than maxAge after it was read.
type localCache struct {
	max    int
	maxAge time.Duration
	now    func() time.Time // time.Now; tests may replace it

	mu    sync.Mutex
	ll    list.List // of *cacheEntry, most recently used first
	items map[string]*list.Element
}

type cacheEntry struct {
	key      string
	rec      *storekit.Record
	deadline time.Time
}

func newLocalCache(entries int, maxAge time.Duration) *localCache {
	return &localCache{max: entries, maxAge: maxAge, now: time.Now, items: make(map[string]*list.Element, min(entries, 1024))}
}

// get returns the record cached for key, or nil. An entry past its deadline
// is dropped, not returned.
func (c *localCache) get(key string) *storekit.Record {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		return nil
	}
	e := el.Value.(*cacheEntry)
	if !now.Before(e.deadline) {
		c.ll.Remove(el)
		delete(c.items, key)
		return nil
	}
	c.ll.MoveToFront(el)
	return e.rec
}

// put caches rec, read from the store by a request sent at sent, if it is a
// completed or failed outcome with time left to serve. In-progress records
// are never cached: their state is the store's to change.
func (c *localCache) put(rec *storekit.Record, sent time.Time) {
	if rec == nil || (rec.Status != storekit.StatusCompleted && rec.Status != storekit.StatusFailed) || rec.Validate() != nil {
		return
	}
	left := c.maxAge
	left = min(left, time.Duration(rec.ExpiresAt-sent.UnixMilli())*time.Millisecond)
	if rec.CompletedAt > 0 {
		left = min(left, time.Duration(rec.ExpiresAt-rec.CompletedAt)*time.Millisecond)
	}
	if left <= 0 {
		return
	}
	e := &cacheEntry{key: rec.Key, rec: rec.Clone(), deadline: sent.Add(left)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[e.key]; ok {
		el.Value = e
		c.ll.MoveToFront(el)
		return
	}
	c.items[e.key] = c.ll.PushFront(e)
	for c.ll.Len() > c.max {
		last := c.ll.Back()
		c.ll.Remove(last)
		delete(c.items, last.Value.(*cacheEntry).key)
	}
}

// remove drops the entry for key, if any.
func (c *localCache) remove(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.items[key]; ok {
		c.ll.Remove(el)
		delete(c.items, key)
	}
}
