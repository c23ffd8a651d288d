package isr

import (
	"container/heap"
	"context"
	"time"

	"github.com/idem-go/idem/storekit"
)

// A MemoryTable keeps every item that has a ttl in an expiryIndex, a heap
// ordered by ttl, so a clean-up pass reads only the items whose ttl has
// passed and a pass that finds none costs one comparison. The index holds
// one entry per item (a rewrite moves it), so it never outgrows the table.

// itemKind says which map an index entry's item is in.
type itemKind uint8

const (
	kindMeta itemKind = iota
	kindLease
	kindRequest
	kindVersion
)

// itemRef names an item of a MemoryTable: its map and its key there (sk
// is the request key or version id, "" for META and LOCK).
type itemRef struct {
	kind itemKind
	pk   string
	sk   string
}

type expiryEntry struct {
	ttl   int64
	ref   itemRef
	index int
}

// expiryIndex is a min-heap of entries by ttl, with each item's entry
// found by its itemRef.
type expiryIndex struct {
	heap expiryHeap
	byID map[itemRef]*expiryEntry
}

// set records that ref's item has ttl (0: none, the entry is dropped).
func (x *expiryIndex) set(ref itemRef, ttl int64) {
	e, ok := x.byID[ref]
	switch {
	case ttl <= 0 && ok:
		x.drop(ref)
	case ttl <= 0:
	case ok:
		e.ttl = ttl
		heap.Fix(&x.heap, e.index)
	default:
		if x.byID == nil {
			x.byID = map[itemRef]*expiryEntry{}
		}
		e = &expiryEntry{ttl: ttl, ref: ref}
		x.byID[ref] = e
		heap.Push(&x.heap, e)
	}
}

// drop forgets ref's entry (the item was deleted).
func (x *expiryIndex) drop(ref itemRef) {
	if e, ok := x.byID[ref]; ok {
		heap.Remove(&x.heap, e.index)
		delete(x.byID, ref)
	}
}

// due returns the entry with the smallest ttl if that ttl has passed at
// now (ttl <= now), as the tables judge a REQ# item's ttl.
func (x *expiryIndex) due(now time.Time) (*expiryEntry, bool) {
	if len(x.heap) == 0 || x.heap[0].ttl > now.Unix() {
		return nil, false
	}
	return x.heap[0], true
}

type expiryHeap []*expiryEntry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].ttl < h[j].ttl }
func (h expiryHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *expiryHeap) Push(x any) {
	e := x.(*expiryEntry)
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

// Writes of a MemoryTable's items, under its mutex: each keeps the expiry
// index in step with the maps.

func (t *memCore) setMeta(m Meta) {
	t.meta[m.PK] = m
	t.expiry.set(itemRef{kind: kindMeta, pk: m.PK}, m.TTL)
	t.grew()
}

func (t *memCore) setLease(l Lease) {
	t.lease[l.PK] = l
	t.expiry.set(itemRef{kind: kindLease, pk: l.PK}, l.TTL)
	t.grew()
}

func (t *memCore) deleteLease(pk string) {
	delete(t.lease, pk)
	t.expiry.drop(itemRef{kind: kindLease, pk: pk})
}

func (t *memCore) setRequest(r Request) {
	t.request[[2]string{r.PK, r.Key}] = r
	t.expiry.set(itemRef{kind: kindRequest, pk: r.PK, sk: r.Key}, r.TTL)
	t.grew()
}

func (t *memCore) deleteRequest(pk, key string) {
	delete(t.request, [2]string{pk, key})
	t.expiry.drop(itemRef{kind: kindRequest, pk: pk, sk: key})
}

func (t *memCore) setVersion(v Version) {
	t.version[[2]string{v.PK, v.ID}] = v
	t.expiry.set(itemRef{kind: kindVersion, pk: v.PK, sk: v.ID}, v.TTL)
	t.grew()
}

// items is how many items the table holds.
func (t *memCore) items() int {
	return len(t.meta) + len(t.lease) + len(t.request) + len(t.version)
}

func (t *memCore) grew() {
	if n := t.items(); n > t.peak {
		t.peak = n
	}
}

// remove deletes the item e names if it is expired at now: its ttl has
// passed and, for LOCK, its lease has expired too (a held lease is never
// removed, whatever its ttl). Every item in the index has a ttl.
func (t *memCore) remove(e *expiryEntry, now time.Time) {
	ref := e.ref
	t.expiry.drop(ref)
	switch ref.kind {
	case kindMeta:
		delete(t.meta, ref.pk)
	case kindLease:
		if l := t.lease[ref.pk]; l.Held(now) {
			// ttl <= now < lease_expires_at: a ttl shorter than the lease
			// (another writer's); kept until the lease expires.
			t.expiry.set(ref, l.ExpiresAt+1)
			return
		}
		delete(t.lease, ref.pk)
	case kindRequest:
		delete(t.request, [2]string{ref.pk, ref.sk})
	case kindVersion:
		delete(t.version, [2]string{ref.pk, ref.sk})
	}
}

// purgeBatch removes at most limit expired items under the mutex, judged
// on the table's clock read under the mutex.
func (t *memCore) purgeBatch(ctx context.Context, limit int) (int, error) {
	if err := t.lock(ctx); err != nil {
		return 0, err
	}
	defer t.mu.Unlock()
	t.requests-- // not a Table call
	now := t.now()
	n := 0
	for n < limit {
		e, ok := t.expiry.due(now)
		if !ok {
			break
		}
		t.remove(e, now)
		n++
	}
	if n < limit {
		t.shrink()
	}
	return n, nil
}

// shrink rebuilds the maps once they hold a quarter of what they held at
// their peak, so the memory of removed items is returned (a Go map never
// shrinks by itself).
func (t *memCore) shrink() {
	n := t.items()
	if t.peak < 1024 || n > t.peak/4 {
		return
	}
	t.meta = rebuild(t.meta)
	t.lease = rebuild(t.lease)
	t.request = rebuild(t.request)
	t.version = rebuild(t.version)
	t.expiry.byID = rebuild(t.expiry.byID)
	t.expiry.heap = append(expiryHeap(nil), t.expiry.heap...)
	t.peak = n
}

func rebuild[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func (t *memCore) purge(ctx context.Context) (int, error) {
	return storekit.PurgeBatches(ctx, storekit.DefaultPurgeBatch, t.purgeBatch)
}

// Purge removes every item whose ttl has passed on the table's clock (a
// LOCK only once its lease has expired too), in batches of
// storekit.DefaultPurgeBatch under the table's mutex, and returns how many
// it removed. The clean-up goroutine runs it; call it yourself under
// WithoutCleanup. It returns ctx's error if ctx ends first.
func (t *MemoryTable) Purge(ctx context.Context) (int, error) {
	if err := t.check(); err != nil {
		return 0, err
	}
	return t.purge(ctx)
}

// Close stops the table's clean-up goroutine and waits for a pass in
// flight to return. The table stays usable; only the background clean-up
// ends. Close may be called more than once and returns nil.
func (t *MemoryTable) Close() error {
	if t.check() != nil {
		return nil
	}
	return t.cleaner.Close()
}

// Len returns how many items the table holds, expired or not (0 for a nil
// or zero MemoryTable).
func (t *MemoryTable) Len() int {
	if t.check() != nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.items()
}
