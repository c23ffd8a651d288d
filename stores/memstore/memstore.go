// Package memstore is an in-memory idem.Store: one mutex, a map, and a heap
// of expiry times so expired records are swept and memory stays bounded by
// the number of live records, not by the number of keys ever seen.
//
// It coordinates goroutines of one process only; use filestore, redisstore,
// dynamostore or sqlstore to coordinate processes. It implements
// idem.Watcher, so Guards in Wait mode are woken without polling.
package memstore

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"github.com/idem-go/idem"
)

// Store is an in-memory idem.Store. The zero value is not usable; call New.
type Store struct {
	now     func() time.Time
	grace   time.Duration
	sweepN  int
	mu      sync.Mutex
	records map[string]*entry
	expiry  expiryHeap
	watch   map[string]chan struct{}
}

type entry struct {
	rec   *idem.Record
	index int // position in the expiry heap
}

// Option configures a Store.
type Option func(*Store)

// WithClock sets the store's clock (default time.Now), for tests.
func WithClock(now func() time.Time) Option {
	return func(s *Store) {
		if now != nil {
			s.now = now
		}
	}
}

// DefaultGrace is how long an expired record is kept before it is swept.
const DefaultGrace = time.Minute

// WithGrace keeps expired (and released) records for d before sweeping
// them, so a key claimed again soon after keeps counting attempts up and
// fencing tokens stay monotonic. Default one minute; 0 sweeps at once.
func WithGrace(d time.Duration) Option {
	return func(s *Store) {
		if d >= 0 {
			s.grace = d
		}
	}
}

// New returns an empty Store.
func New(opts ...Option) *Store {
	s := &Store{
		now: time.Now, sweepN: 16, grace: DefaultGrace,
		records: make(map[string]*entry),
		watch:   make(map[string]chan struct{}),
	}
	for _, o := range opts {
		if o != nil {
			o(s)
		}
	}
	return s
}

var _ idem.Store = (*Store)(nil)
var _ idem.Watcher = (*Store)(nil)

func (s *Store) nowMs() int64 { return s.now().UnixMilli() }

// Claim implements idem.Store.
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.ClaimResult, error) {
	if err := ctx.Err(); err != nil {
		return idem.ClaimResult{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.nowMs()
	s.sweepLocked(now)
	var cur *idem.Record
	if e := s.records[req.Key]; e != nil {
		cur = e.rec
	}
	res := idem.DecideClaim(cur, req, now)
	if res.Outcome != idem.Existing && res.Record != cur {
		s.putLocked(res.Record)
		if res.Outcome == idem.TookOver {
			s.notifyLocked(req.Key)
		}
	}
	return idem.ClaimResult{Outcome: res.Outcome, Record: res.Record.Clone()}, nil
}

// Heartbeat implements idem.Store.
func (s *Store) Heartbeat(ctx context.Context, key, nonce string, leaseTTL time.Duration) error {
	return s.update(ctx, key, false, func(cur *idem.Record, now int64) (*idem.Record, error) {
		return idem.ApplyHeartbeat(cur, nonce, leaseTTL, now)
	})
}

// Complete implements idem.Store.
func (s *Store) Complete(ctx context.Context, key, nonce string, c idem.Completion) error {
	return s.update(ctx, key, true, func(cur *idem.Record, now int64) (*idem.Record, error) {
		return idem.ApplyComplete(cur, nonce, c, now)
	})
}

// Release implements idem.Store.
func (s *Store) Release(ctx context.Context, key, nonce string) error {
	return s.update(ctx, key, true, func(cur *idem.Record, now int64) (*idem.Record, error) {
		return idem.ApplyRelease(cur, nonce, now)
	})
}

func (s *Store) update(ctx context.Context, key string, notify bool, apply func(*idem.Record, int64) (*idem.Record, error)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var cur *idem.Record
	if e := s.records[key]; e != nil {
		cur = e.rec
	}
	next, err := apply(cur, s.nowMs())
	if err != nil {
		return err
	}
	s.putLocked(next)
	if notify {
		s.notifyLocked(key)
	}
	return nil
}

// Get implements idem.Store.
func (s *Store) Get(ctx context.Context, key string) (*idem.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.records[key]
	if e == nil || !e.rec.Live(s.nowMs()) {
		return nil, idem.ErrNotFound
	}
	return e.rec.Clone(), nil
}

// Delete implements idem.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.records[key]; e != nil {
		heap.Remove(&s.expiry, e.index)
		delete(s.records, key)
		s.notifyLocked(key)
	}
	return nil
}

// Watch implements idem.Watcher: the channel is closed by the next
// complete, release, takeover or delete of key.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ch := s.watch[key]
	if ch == nil {
		ch = make(chan struct{})
		s.watch[key] = ch
	}
	return ch, func() {}, nil
}

// Len returns the number of records held, live or awaiting the sweep.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.records)
}

// Sweep removes every record that expired (plus the grace period) and
// returns how many it removed. Claims sweep a few records each, so calling
// Sweep is never required.
func (s *Store) Sweep() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sweepUpTo(s.nowMs(), len(s.records))
}

func (s *Store) sweepLocked(now int64) { s.sweepUpTo(now, s.sweepN) }

func (s *Store) sweepUpTo(now int64, n int) int {
	removed := 0
	limit := now - s.grace.Milliseconds()
	for removed < n && len(s.expiry) > 0 && s.expiry[0].rec.ExpiresAt <= limit {
		e := heap.Pop(&s.expiry).(*entry)
		delete(s.records, e.rec.Key)
		s.notifyLocked(e.rec.Key)
		removed++
	}
	return removed
}

func (s *Store) putLocked(rec *idem.Record) {
	rec = rec.Clone()
	if e := s.records[rec.Key]; e != nil {
		e.rec = rec
		heap.Fix(&s.expiry, e.index)
		return
	}
	e := &entry{rec: rec}
	s.records[rec.Key] = e
	heap.Push(&s.expiry, e)
}

func (s *Store) notifyLocked(key string) {
	if ch := s.watch[key]; ch != nil {
		close(ch)
		delete(s.watch, key)
	}
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
