// Package memstore keeps idem's records in memory, for the goroutines of
// one process. Make the store and hand it to idem.New:
//
//	store, err := memstore.New()
//	defer store.Close() // stops the store's clean-up; the store stays usable
//	g, err := idem.New[string](store, idem.OnDuplicate(idem.Wait))
//	v, err := g.Do(ctx, "daily-report-2026-11-24", sendReport)
//
// Concurrent calls of one key run the function once, and waiting
// duplicates are woken when it completes, without polling. To coordinate
// processes or hosts use filestore, redisstore, dynamostore, sqlstore or
// natsstore; memstore also suits tests. Its callers share one process, so
// it has no owners to tell dead from alive (storekit.Presence): a claim
// that is never completed is taken over after the takeover threshold.
//
// Memory stays bounded by the number of live records, not by the number
// of keys ever seen: a record is removed once its expiry plus the
// retention (WithRetention, default one minute) has passed. The store
// removes such records itself, about every DefaultCleanup (one second), in
// small batches that never hold up a call for long; WithCleanup(every)
// changes the interval, WithoutCleanup() turns it off for a program that
// calls Purge itself. The store decides with the caller's clock, which
// WithClock replaces.
//
// How the records are sharded and how the clean-up removes them and gives
// memory back is described in [docs/memstore.md].
//
// [docs/memstore.md]: https://github.com/idem-go/idem/blob/main/docs/memstore.md
package memstore

import (
	"context"
	"hash/maphash"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem/storekit"
)

// Store is an in-memory storekit.Store. The zero value is not usable; call New.
type Store struct {
	kit     *storekit.Locked
	mem     *memory
	cleaner *storekit.Cleaner // nil under WithoutCleanup
}

const (
	// nShards is how many shards hold the records, each under a mutex of
	// its own: a batch of removals, a rebuilt map, or a holder the OS
	// deschedules holds up the calls of one shard's keys only.
	nShards = 256
	// shrinkFloor is the peak below which a shard's map and heap are not
	// rebuilt: so small a shard holds a few kilobytes at most.
	shrinkFloor = 64
	// sweepN is how many expired records a write removes at most from its
	// shard, so a write stays cheap.
	sweepN = 16
	// batchSize is how many expired records Purge and the clean-up remove
	// under one hold of a shard's mutex: about 25 µs of work.
	batchSize = 64
	// workFor is how long Purge and the clean-up remove records before
	// they pause for three times as long, so that a removal of 1M records
	// (about a second of work) sleeps often enough that the OS does not
	// deschedule it in the middle of a batch, with a shard's mutex held,
	// while the calls of that shard wait, and leaves the calls most of the
	// CPU. On 2 cores loaded by other processes (load average 20), the
	// slowest call of a probe beside the removal of 300k records was 72-83
	// ms without the pauses and 10 ms with them. On a quiet machine, the
	// probe's p99 beside the removal of 1M records was 1.53-2.19x of a
	// window without (2 of 3 runs within 2x) pausing as long as it worked,
	// and 1.55-1.98x (4 of 4) pausing three times as long; the removal
	// took 1.9-3.6 s and 4.2-4.7 s.
	workFor = time.Millisecond
	// pauseRatio is how many times as long as it worked the removal
	// pauses.
	pauseRatio = 3
)

// memory is the storekit.Backend under a Store, and its watchers.
type memory struct {
	now       func() time.Time
	retention time.Duration
	seed      maphash.Seed

	shards [nShards]shard
	count  atomic.Int64 // records held, in all shards
	watch  storekit.Watchers

	passes atomic.Int64 // clean-up passes finished, for tests
}

// shard holds the records of the keys that hash to it, and the heap of
// their expiry times, under its mutex. A Go map never gives back the room
// it grew to, so a shard that shrank well below its peak is rebuilt.
type shard struct {
	mu     sync.Mutex
	m      map[string]*entry
	peak   int // the most records m held since it was made
	expiry expiryHeap
	_      [16]byte // one shard per 64-byte cache line
}

type entry struct {
	rec   *storekit.Record
	index int // position in its shard's expiry heap
}

// Option configures a Store. New checks every option and reports each
// invalid one as an *storekit.OptionError matching storekit.ErrInvalidOption.
type Option func(*config)

type config struct {
	storekit.Options
	logger *slog.Logger // nil: slog.Default()
}

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

// DefaultCleanup is about how often an open store removes expired records
// by itself.
const DefaultCleanup = time.Second

// WithCleanup sets how often the store removes expired records by itself
// until Close: about once per interval every (each wait drawn from
// [every/2, 3*every/2)); the default is DefaultCleanup. A pass costs next
// to nothing when nothing has expired. every must be at least a
// millisecond; a huge every means rarely. It overrides an earlier
// WithoutCleanup.
func WithCleanup(every time.Duration) Option {
	return func(c *config) { c.SetCleanup(every) }
}

// WithoutCleanup runs no clean-up goroutine: expired records are removed
// only by Purge and, a few at a time, by writes. For users who call Purge
// from a job of their own. It overrides an earlier WithCleanup.
func WithoutCleanup() Option {
	return func(c *config) { c.SetNoCleanup() }
}

// WithLogger sets where a failed clean-up pass is logged (at Warn, with
// the error); the default is slog.Default(). A nil logger is an invalid
// option.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.Invalid("WithLogger", "logger is nil")
			return
		}
		c.logger = l
	}
}

// New returns an empty Store. Unless WithoutCleanup is given, it starts
// the store's clean-up goroutine; Close stops it. Every invalid option is
// reported, joined, each an *storekit.OptionError matching
// storekit.ErrInvalidOption.
func New(opts ...Option) (*Store, error) {
	c := config{Options: storekit.Options{Store: "memstore", Now: time.Now, Retention: DefaultRetention, Cleanup: DefaultCleanup}}
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
	m := &memory{now: c.Now, retention: c.Retention, seed: maphash.MakeSeed()}
	kit := storekit.NewLocked(m, storekit.LockedConfig{Name: "memstore", Now: m.now, Changed: m.watch.Notify})
	s := &Store{kit: kit, mem: m}
	if !c.NoCleanup {
		// The goroutine holds m, never s, so a Store dropped without Close
		// becomes unreachable, and its clean-up is stopped then.
		s.cleaner = storekit.StartCleaner("memstore", c.Cleanup, c.logger, func(ctx context.Context) error {
			_, err := m.clean(ctx)
			m.passes.Add(1)
			return err
		})
		runtime.AddCleanup(s, func(c *storekit.Cleaner) { go c.Close() }, s.cleaner)
	}
	return s, nil
}

var (
	_ storekit.Store   = (*Store)(nil)
	_ storekit.Watcher = (*Store)(nil)
	_ storekit.Backend = (*memory)(nil)
)

// Close stops the store's clean-up goroutine and waits for a pass in
// flight to return. The store stays usable: every call works after Close
// as before it, writes go on removing a few expired records each, and
// Purge removes the rest; only the background clean-up ends. Close may be
// called more than once and always returns nil.
func (s *Store) Close() error {
	return s.cleaner.Close()
}

// Claim implements storekit.Store.
func (s *Store) Claim(ctx context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, error) {
	return s.kit.Claim(ctx, req)
}

// Heartbeat implements storekit.Store.
func (s *Store) Heartbeat(ctx context.Context, key, nonce string, leaseTTL time.Duration) error {
	return s.kit.Heartbeat(ctx, key, nonce, leaseTTL)
}

// Complete implements storekit.Store.
func (s *Store) Complete(ctx context.Context, key, nonce string, c storekit.Completion) error {
	return s.kit.Complete(ctx, key, nonce, c)
}

// Release implements storekit.Store. The record is kept (for the retention
// period) with ExpiresAt = now, so attempts go on counting.
func (s *Store) Release(ctx context.Context, key, nonce string) error {
	return s.kit.Release(ctx, key, nonce)
}

// Get implements storekit.Store.
func (s *Store) Get(ctx context.Context, key string) (*storekit.Record, error) {
	return s.kit.Get(ctx, key)
}

// Delete implements storekit.Store.
func (s *Store) Delete(ctx context.Context, key string) error {
	return s.kit.Delete(ctx, key)
}

// Watch implements storekit.Watcher: the channel is closed by the next claim,
// takeover, completion, release, delete or purge of key. stop ends the
// watch and frees it; so does the end of ctx (the channel is then never
// closed). A ctx that has already ended is an error.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	if err := storekit.ValidateKey(key); err != nil {
		return nil, nil, err
	}
	return s.mem.watch.Watch(ctx, key)
}

// Len returns the number of records held, live or awaiting removal.
func (s *Store) Len() int { return int(s.mem.count.Load()) }

// Purge removes every record whose ExpiresAt plus the retention period has
// passed and returns how many it removed, and gives back the memory the
// removed records' maps held (see Lifecycle in docs/memstore.md). It works in batches, lets
// other calls through between them and pauses three times as long as it worked
// after each millisecond of work; a record is removed only if it is expired past
// retention when its batch removes it. The clean-up
// goroutine runs the same pass, so calling Purge is needed only under
// WithoutCleanup. It returns ctx's error if ctx ends first.
func (s *Store) Purge(ctx context.Context) (int, error) {
	return s.mem.clean(ctx)
}

// shard returns the shard of key.
func (m *memory) shard(key string) *shard {
	return &m.shards[maphash.String(m.seed, key)%nShards]
}

// Load implements storekit.Backend.
func (m *memory) Load(_ context.Context, key string) (*storekit.Record, error) {
	sh := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[key]; e != nil {
		return e.rec.Clone(), nil
	}
	return nil, nil
}

// Update implements storekit.Backend. It removes a few expired records of
// the key's shard first, which keeps memory bounded under writes between
// clean-up passes.
func (m *memory) Update(_ context.Context, key string, fn func(*storekit.Record) (*storekit.Record, error)) error {
	sh := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	m.purgeLocked(sh, sweepN)
	// A stored record is replaced, never changed, so fn gets the stored one
	// itself, and the one it returns is stored as it is (the Backend
	// contract: fn changes neither; Locked copies what it returns).
	var cur *storekit.Record
	if e := sh.m[key]; e != nil {
		cur = e.rec
	}
	next, err := fn(cur)
	if err != nil || next == nil {
		return err
	}
	if e := sh.m[key]; e != nil {
		e.rec = next
		sh.expiry.fix(e.index)
		return nil
	}
	if sh.m == nil {
		sh.m = make(map[string]*entry)
	}
	e := &entry{rec: next}
	sh.m[key] = e
	sh.peak = max(sh.peak, len(sh.m))
	sh.expiry.push(e)
	m.count.Add(1)
	return nil
}

// Delete implements storekit.Backend.
func (m *memory) Delete(_ context.Context, key string) error {
	sh := m.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e := sh.m[key]; e != nil {
		sh.expiry.remove(e.index)
		delete(sh.m, key)
		m.count.Add(-1)
	}
	return nil
}

// clean is a clean-up pass and Purge: shard by shard, the expired records
// in batches, then the shard's map and heap if they shrank well below
// their peak. After each millisecond spent removing, it pauses three
// times as long as it worked (a storekit.Pacer; see workFor).
func (m *memory) clean(ctx context.Context) (int, error) {
	total := 0
	pace := storekit.Pacer{Ratio: pauseRatio, Min: workFor}
	_ = pace.Rest(ctx) // starts the count
	for i := range m.shards {
		sh := &m.shards[i]
		n, err := storekit.PurgeBatches(ctx, batchSize, func(ctx context.Context, limit int) (int, error) {
			n := m.purgeBatch(sh, limit)
			return n, pace.Rest(ctx)
		})
		total += n
		if err != nil {
			return total, err
		}
		sh.mu.Lock()
		sh.shrinkLocked()
		sh.mu.Unlock()
	}
	return total, nil
}

// purgeBatch removes up to limit expired records of sh under one hold of
// its mutex.
func (m *memory) purgeBatch(sh *shard, limit int) int {
	sh.mu.Lock()
	n := m.purgeLocked(sh, limit)
	sh.mu.Unlock()
	if n == limit {
		// Let a call waiting for the mutex have it before the next batch.
		runtime.Gosched()
	}
	return n
}

// purgeLocked removes up to n records of sh expired past retention on the
// clock read now, under sh's mutex.
func (m *memory) purgeLocked(sh *shard, n int) int {
	if len(sh.expiry) == 0 {
		return 0
	}
	limit := m.now().UnixMilli() - m.retention.Milliseconds()
	removed := 0
	for removed < n && len(sh.expiry) > 0 && sh.expiry[0].exp <= limit {
		e := sh.expiry[0].e
		sh.expiry.remove(0)
		delete(sh.m, e.rec.Key)
		m.watch.Notify(e.rec.Key)
		removed++
	}
	if removed > 0 {
		m.count.Add(int64(-removed))
	}
	return removed
}

// shrinkLocked rebuilds sh's map when it holds less than a quarter of its
// peak, and reallocates its heap's array when that is less than a quarter
// full. Each copies live entries only, and only when at least three times
// as many were removed since the last copy, so copying costs a fraction of
// the removals.
func (sh *shard) shrinkLocked() {
	if sh.peak >= shrinkFloor && len(sh.m) < sh.peak/4 {
		if len(sh.m) == 0 {
			sh.m = nil
		} else {
			fresh := make(map[string]*entry, len(sh.m))
			for k, e := range sh.m {
				fresh[k] = e
			}
			sh.m = fresh
		}
		sh.peak = len(sh.m)
	}
	if c := cap(sh.expiry); c >= shrinkFloor && len(sh.expiry) < c/4 {
		sh.expiry = append(expiryHeap(nil), sh.expiry...)
	}
}
