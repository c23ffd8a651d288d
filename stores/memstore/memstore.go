// Package memstore is an in-memory idem.Store: one mutex, a map, and a heap
// of expiry times so expired records are purged and memory stays bounded by
// the number of live records, not by the number of keys ever seen.
//
// It coordinates goroutines of one process only; use filestore, redisstore,
// dynamostore or sqlstore to coordinate processes. It implements
// idem.Watcher, so Guards in Wait mode are woken without polling.
//
// Its decisions are storekit's (memstore is a storekit.Backend under a
// storekit.Locked store); it decides with the caller's clock, replaceable
// with WithClock.
package memstore

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/storekit"
)

// Store is an in-memory idem.Store. The zero value is not usable; call New.
type Store struct {
	kit *storekit.Locked
	mem *memory
}

// memory is the storekit.Backend under a Store, and its watchers.
type memory struct {
	now       func() time.Time
	retention time.Duration
	sweepN    int // records purged at most per write, so a write stays cheap

	mu      sync.Mutex
	records map[string]*entry
	expiry  expiryHeap
	watch   storekit.Watchers
}

type entry struct {
	rec   *idem.Record
	index int // position in the expiry heap
}

// Option configures a Store. New checks every option and reports each
// invalid one as an *idem.OptionError matching idem.ErrInvalidOption.
type Option func(*config)

type config struct{ storekit.Options }

// WithClock sets the store's clock (default time.Now), for tests and for
// users with a trusted time source. A nil clock is an invalid option.
func WithClock(now func() time.Time) Option {
	return func(c *config) { c.SetClock(now) }
}

// DefaultRetention is how long a record is kept past its ExpiresAt before
// it is purged.
const DefaultRetention = time.Minute

// WithRetention keeps records for d past their ExpiresAt (expired and
// released ones alike) before purging them, so a key claimed again soon
// after goes on counting attempts and fencing tokens stay monotonic.
// Default one minute; 0 purges at once; negative is an invalid option.
func WithRetention(d time.Duration) Option {
	return func(c *config) { c.SetRetention(d) }
}

// New returns an empty Store. Every invalid option is reported, joined,
// each an *idem.OptionError matching idem.ErrInvalidOption.
func New(opts ...Option) (*Store, error) {
	c := config{storekit.Options{Store: "memstore", Now: time.Now, Retention: DefaultRetention}}
	for _, o := range opts {
		if o == nil {
			c.Invalid("New", "nil option")
			continue
		}
		o(&c)
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	m := &memory{
		now: c.Now, sweepN: 16, retention: c.Retention,
		records: make(map[string]*entry),
	}
	kit := storekit.NewLocked(m, storekit.LockedConfig{Name: "memstore", Now: m.now, Changed: m.watch.Notify})
	return &Store{kit: kit, mem: m}, nil
}

var (
	_ idem.Store       = (*Store)(nil)
	_ idem.Watcher     = (*Store)(nil)
	_ storekit.Backend = (*memory)(nil)
)

// Claim implements idem.Store.
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.ClaimResult, error) {
	return s.kit.Claim(ctx, req)
}

// Heartbeat implements idem.Store.
func (s *Store) Heartbeat(ctx context.Context, key, nonce string, leaseTTL time.Duration) error {
	return s.kit.Heartbeat(ctx, key, nonce, leaseTTL)
}

// Complete implements idem.Store.
func (s *Store) Complete(ctx context.Context, key, nonce string, c idem.Completion) error {
	return s.kit.Complete(ctx, key, nonce, c)
}

// Release implements idem.Store. The record is kept (for the retention
// period) with ExpiresAt = now, so attempts go on counting.
func (s *Store) Release(ctx context.Context, key, nonce string) error {
	return s.kit.Release(ctx, key, nonce)
}

// Get implements idem.Store.
func (s *Store) Get(ctx context.Context, key string) (*idem.Record, error) {
	return s.kit.Get(ctx, key)
}

// Delete implements idem.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	return s.kit.Delete(ctx, key)
}

// Watch implements idem.Watcher: the channel is closed by the next claim,
// takeover, completion, release, delete or purge of key. stop ends the
// watch and frees it; so does the end of ctx (the channel is then never
// closed). A ctx that has already ended is an error.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := storekit.ValidateKey(key); err != nil {
		return nil, nil, err
	}
	return s.mem.watch.Watch(ctx, key)
}

// Len returns the number of records held, live or awaiting the purge.
func (s *Store) Len() int {
	s.mem.mu.Lock()
	defer s.mem.mu.Unlock()
	return len(s.mem.records)
}

// Purge removes every record whose ExpiresAt plus the retention period has
// passed and returns how many it removed. Writes purge a few records each,
// so calling Purge is never required.
func (s *Store) Purge(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	m := s.mem
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.purgeLocked(m.now().UnixMilli(), len(m.records)), nil
}

// Load implements storekit.Backend.
func (m *memory) Load(_ context.Context, key string) (*idem.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.records[key]; e != nil {
		return e.rec.Clone(), nil
	}
	return nil, nil
}

// Update implements storekit.Backend. It purges a few expired records
// first, which keeps memory bounded without a purge loop.
func (m *memory) Update(_ context.Context, key string, fn func(*idem.Record) (*idem.Record, error)) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.purgeLocked(m.now().UnixMilli(), m.sweepN)
	// A stored record is replaced, never changed, so fn gets the stored one
	// itself, and the one it returns is stored as it is (the Backend
	// contract: fn changes neither; Locked copies what it returns).
	var cur *idem.Record
	if e := m.records[key]; e != nil {
		cur = e.rec
	}
	next, err := fn(cur)
	if err != nil || next == nil {
		return err
	}
	if e := m.records[key]; e != nil {
		e.rec = next
		heap.Fix(&m.expiry, e.index)
		return nil
	}
	e := &entry{rec: next}
	m.records[key] = e
	heap.Push(&m.expiry, e)
	return nil
}

// Delete implements storekit.Backend.
func (m *memory) Delete(_ context.Context, key string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.records[key]; e != nil {
		heap.Remove(&m.expiry, e.index)
		delete(m.records, key)
	}
	return nil
}

func (m *memory) purgeLocked(now int64, n int) int {
	removed := 0
	limit := now - m.retention.Milliseconds()
	for removed < n && len(m.expiry) > 0 && m.expiry[0].rec.ExpiresAt <= limit {
		e := heap.Pop(&m.expiry).(*entry)
		delete(m.records, e.rec.Key)
		m.watch.Notify(e.rec.Key)
		removed++
	}
	return removed
}

// expiryHeap orders entries by ExpiresAt, soonest first.
type expiryHeap []*entry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].rec.ExpiresAt < h[j].rec.ExpiresAt }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *expiryHeap) Push(x any) {
	e := x.(*entry)
	e.index = len(*h)
	*h = append(*h, e)
}
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	return e
}
