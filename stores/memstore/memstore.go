// Package memstore is an in-memory idem.Store: one mutex, a map of records,
// and a heap of expiry times, so expired records are removed and memory
// stays bounded by the number of live records, not by the number of keys
// ever seen.
//
// It coordinates goroutines of one process only; use filestore, redisstore,
// dynamostore or sqlstore to coordinate processes. It implements
// idem.Watcher, so Guards in Wait mode are woken without polling.
//
// Its decisions are storekit's (memstore is a storekit.Backend under a
// storekit.Locked store); it decides with the caller's clock, replaceable
// with WithClock.
//
// # Lifecycle
//
// A record is removed once its ExpiresAt plus the retention period
// (WithRetention, default one minute) has passed on the store's clock,
// judged under the store's mutex at the moment of removal, so a claim,
// heartbeat or completion racing the removal never loses to it. Three
// things remove expired records:
//
//   - The clean-up: while the store is open, a goroutine of its own removes
//     every expired record about every DefaultCleanup (one second; each
//     wait is jittered by ±50%). WithCleanup(every) changes the interval;
//     WithoutCleanup() runs none, for users who call Purge themselves.
//     Close stops it.
//   - Purge removes every expired record when called.
//   - Every write removes up to 16 expired records before it writes.
//
// The clean-up and Purge remove records in batches of 64 (about 25 µs of
// work) through storekit.PurgeBatches and release the mutex between
// batches, so a claim waits for one batch at most, never for the whole
// backlog (TestSoakCleanup, run with IDEM_SOAK=1, measures calls beside
// the removal of 1M records). A pass that finds nothing expired looks at
// the soonest expiry only and reads no live record.
//
// Both also give memory back. Go maps never shrink, so the records are
// kept in 256 maps by key hash, and a map that holds less than a quarter of
// the most it held since it was last built is rebuilt at its current size,
// one map per hold of the mutex (a copy of its live records only); the
// expiry heap's array is reallocated the same way. Once the records of a
// burst have expired and a pass has run, the heap returns to about what it
// was before the burst.
//
// A Store that becomes unreachable without Close stops its clean-up too
// (runtime.AddCleanup), but call Close when you are done with a store.
package memstore

import (
	"context"
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/storekit"
)

// Store is an in-memory idem.Store. The zero value is not usable; call New.
type Store struct {
	kit     *storekit.Locked
	mem     *memory
	cleaner *storekit.Cleaner // nil under WithoutCleanup
}

const (
	// nShards is how many maps hold the records: a rebuild copies one of
	// them, so it holds the mutex for about 1/nShards of the live records.
	nShards = 256
	// shrinkFloor is the peak below which a map is not rebuilt: so small a
	// map holds a few kilobytes at most.
	shrinkFloor = 64
	// heapFloor is the capacity below which the expiry heap's array is not
	// reallocated.
	heapFloor = 1024
	// sweepN is how many expired records a write removes at most, so a
	// write stays cheap.
	sweepN = 16
	// batchSize is how many expired records Purge and the clean-up remove
	// under one hold of the mutex: about 25 µs of work (0.4 µs a record
	// from a heap of 1M). The shorter the hold, the fewer holders the OS
	// deschedules while the mutex is held; removing 1M records beside a
	// probe of calls on 2 busy cores, batches of 500
	// (storekit.DefaultPurgeBatch) held it 250 µs at p50 and gave the
	// probe a p99 of 1.7 ms (86 µs without removal); batches of 64, 28 µs
	// and 0.12 ms (54 µs), in as much total time.
	batchSize = 64
)

// memory is the storekit.Backend under a Store, and its watchers.
type memory struct {
	now       func() time.Time
	retention time.Duration
	seed      maphash.Seed

	mu     sync.Mutex
	shards [nShards]shard
	count  int // records held, in all shards
	expiry expiryHeap
	watch  storekit.Watchers

	passes atomic.Int64 // clean-up passes finished, for tests
}

// shard is one of the maps of records: a Go map never gives back the room
// it grew to, so a shard that shrank well below its peak is rebuilt.
type shard struct {
	m    map[string]*entry
	peak int // the most records m held since it was made
}

type entry struct {
	rec   *idem.Record
	index int    // position in the expiry heap
	shard uint16 // the shard holding it
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

// DefaultCleanup is about how often an open store removes expired records
// by itself.
const DefaultCleanup = time.Second

// WithCleanup makes the store remove expired records by itself about every
// d (each wait drawn from [d/2, 3d/2)) until Close; the default is
// DefaultCleanup. A pass costs next to nothing when nothing has expired. d
// must be positive. It overrides an earlier WithoutCleanup.
func WithCleanup(every time.Duration) Option {
	return func(c *config) { c.SetCleanup(every) }
}

// WithoutCleanup runs no clean-up goroutine: expired records are removed
// only by Purge and, a few at a time, by writes. For users who call Purge
// from a job of their own. It overrides an earlier WithCleanup.
func WithoutCleanup() Option {
	return func(c *config) { c.SetNoCleanup() }
}

// New returns an empty Store. Unless WithoutCleanup is given, it starts
// the store's clean-up goroutine; Close stops it. Every invalid option is
// reported, joined, each an *idem.OptionError matching
// idem.ErrInvalidOption.
func New(opts ...Option) (*Store, error) {
	c := config{storekit.Options{Store: "memstore", Now: time.Now, Retention: DefaultRetention, Cleanup: DefaultCleanup}}
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
		s.cleaner = storekit.StartCleaner("memstore", c.Cleanup, func(ctx context.Context) error {
			_, err := m.clean(ctx)
			m.passes.Add(1)
			return err
		})
		runtime.AddCleanup(s, func(c *storekit.Cleaner) { go c.Close() }, s.cleaner)
	}
	return s, nil
}

var (
	_ idem.Store       = (*Store)(nil)
	_ idem.Watcher     = (*Store)(nil)
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

// Len returns the number of records held, live or awaiting removal.
func (s *Store) Len() int {
	s.mem.mu.Lock()
	defer s.mem.mu.Unlock()
	return s.mem.count
}

// Purge removes every record whose ExpiresAt plus the retention period has
// passed and returns how many it removed; then it gives back the memory
// the removed records' maps held (see Lifecycle). It works in batches and
// lets other calls through between them; a record is removed only if it
// is expired past retention when its batch removes it. The clean-up
// goroutine runs the same pass, so calling Purge is needed only under
// WithoutCleanup. It returns ctx's error if ctx ends first.
func (s *Store) Purge(ctx context.Context) (int, error) {
	return s.mem.clean(ctx)
}

// shardOf returns the shard of key.
func (m *memory) shardOf(key string) uint16 {
	return uint16(maphash.String(m.seed, key) % nShards)
}

// Load implements storekit.Backend.
func (m *memory) Load(_ context.Context, key string) (*idem.Record, error) {
	i := m.shardOf(key)
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.shards[i].m[key]; e != nil {
		return e.rec.Clone(), nil
	}
	return nil, nil
}

// Update implements storekit.Backend. It removes a few expired records
// first, which keeps memory bounded under writes between clean-up passes.
func (m *memory) Update(_ context.Context, key string, fn func(*idem.Record) (*idem.Record, error)) error {
	i := m.shardOf(key)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.purgeLocked(m.now().UnixMilli(), sweepN)
	// A stored record is replaced, never changed, so fn gets the stored one
	// itself, and the one it returns is stored as it is (the Backend
	// contract: fn changes neither; Locked copies what it returns).
	sh := &m.shards[i]
	var cur *idem.Record
	if e := sh.m[key]; e != nil {
		cur = e.rec
	}
	next, err := fn(cur)
	if err != nil || next == nil {
		return err
	}
	if e := sh.m[key]; e != nil {
		e.rec = next
		m.expiry.fix(e.index)
		return nil
	}
	if sh.m == nil {
		sh.m = make(map[string]*entry)
	}
	e := &entry{rec: next, shard: i}
	sh.m[key] = e
	sh.peak = max(sh.peak, len(sh.m))
	m.count++
	m.expiry.push(e)
	return nil
}

// Delete implements storekit.Backend.
func (m *memory) Delete(_ context.Context, key string) error {
	i := m.shardOf(key)
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.shards[i].m[key]; e != nil {
		m.expiry.remove(e.index)
		delete(m.shards[i].m, key)
		m.count--
	}
	return nil
}

// clean is a clean-up pass and Purge: the expired records in batches, then
// the maps and the heap's array that shrank well below their peak.
func (m *memory) clean(ctx context.Context) (int, error) {
	n, err := storekit.PurgeBatches(ctx, batchSize, m.purgeBatch)
	if err != nil {
		return n, err
	}
	return n, m.shrink(ctx)
}

// purgeBatch removes up to limit expired records under one hold of the
// mutex, judged on the clock read under it.
func (m *memory) purgeBatch(_ context.Context, limit int) (int, error) {
	m.mu.Lock()
	n := m.purgeLocked(m.now().UnixMilli(), limit)
	m.mu.Unlock()
	if n == limit {
		// Let a claim that waits for the mutex have it before the next
		// batch: on a busy machine the waiter may not have been scheduled
		// yet, and the next Lock would otherwise take the mutex again.
		runtime.Gosched()
	}
	return n, nil
}

// purgeLocked removes up to n records expired past retention at now.
func (m *memory) purgeLocked(now int64, n int) int {
	removed := 0
	limit := now - m.retention.Milliseconds()
	for removed < n && len(m.expiry) > 0 && m.expiry[0].exp <= limit {
		e := m.expiry[0].e
		m.expiry.remove(0)
		delete(m.shards[e.shard].m, e.rec.Key)
		m.count--
		m.watch.Notify(e.rec.Key)
		removed++
	}
	return removed
}

// shrink rebuilds each map holding less than a quarter of its peak, one
// map per hold of the mutex, and reallocates the expiry heap's array when
// it is less than a quarter full. Each copies live entries only, and only
// when the removals since the last copy were at least three times as many,
// so the copying costs a fraction of the removals.
func (m *memory) shrink(ctx context.Context) error {
	for i := range m.shards {
		if err := ctx.Err(); err != nil {
			return err
		}
		m.mu.Lock()
		sh := &m.shards[i]
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
		m.mu.Unlock()
	}
	m.mu.Lock()
	if c := cap(m.expiry); c >= heapFloor && len(m.expiry) < c/4 {
		m.expiry = append(expiryHeap(nil), m.expiry...)
	}
	m.mu.Unlock()
	return nil
}
