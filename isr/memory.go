package isr

import (
	"context"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/idem-go/idem/storekit"
)

// MemoryTable is an in-process Table with the same behaviour as
// the DynamoDB table (dynamoisr.Table): every method is atomic under one mutex and decides expiry
// with the caller's Now. It is for tests, examples and single-process
// servers. The zero value is not usable; call NewMemoryTable.
//
// Items whose ttl has passed on the table's clock are removed by a
// clean-up goroutine (WithCleanup, WithoutCleanup, Close, Purge), as
// DynamoDB's TTL deletion would remove them; see Lifecycle in
// docs/isr.md. A MemoryTable dropped without Close stops its
// clean-up too, but call Close when you are done with one.
type MemoryTable struct {
	*memCore
	cleaner *storekit.Cleaner // nil under WithoutCleanup
}

// memCore is a MemoryTable's state, apart from its cleaner, so that the
// clean-up goroutine holds it and not the MemoryTable.
type memCore struct {
	mu       sync.Mutex
	now      func() time.Time
	meta     map[string]Meta
	lease    map[string]Lease
	request  map[[2]string]Request
	version  map[[2]string]Version
	expiry   expiryIndex
	peak     int // most items held since the maps were last rebuilt
	requests int64
}

// NewMemoryTable returns an empty MemoryTable. Unless WithoutCleanup is
// given, it starts the table's clean-up goroutine (about every
// DefaultTableCleanup; WithCleanup changes it); Close stops it. Every
// invalid option (WithoutFileSync among them) is reported, joined, each an
// *storekit.OptionError matching idem.ErrInvalidOption.
func NewMemoryTable(opts ...TableOption) (*MemoryTable, error) {
	c := newTableConfig()
	c.apply("NewMemoryTable", opts)
	if c.syncSet {
		c.Invalid("WithoutFileSync", "applies to a FileTable only")
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	core := &memCore{
		now:     c.Now,
		meta:    map[string]Meta{},
		lease:   map[string]Lease{},
		request: map[[2]string]Request{},
		version: map[[2]string]Version{},
	}
	t := &MemoryTable{memCore: core}
	if !c.NoCleanup {
		t.cleaner = storekit.StartCleaner("isr.MemoryTable", c.Cleanup, c.logger, func(ctx context.Context) error {
			_, err := core.purge(ctx)
			return err
		})
		runtime.AddCleanup(t, func(c *storekit.Cleaner) { go c.Close() }, t.cleaner)
	}
	return t, nil
}

var _ Table = (*MemoryTable)(nil)

// check refuses a MemoryTable that NewMemoryTable did not make.
func (t *MemoryTable) check() error {
	if t == nil || t.memCore == nil {
		return unmade("MemoryTable", "NewMemoryTable")
	}
	return nil
}

// Requests returns how many Table calls the MemoryTable has served (each is
// one request to a real store; 0 for a nil or zero MemoryTable).
func (t *MemoryTable) Requests() int64 {
	if t.check() != nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.requests
}

func (t *memCore) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.mu.Lock()
	t.requests++
	return nil
}

// lookup returns m[k] under the lock, or ErrNotFound.
func lookup[K comparable, V any](ctx context.Context, t *MemoryTable, m map[K]V, k K) (V, error) {
	var zero V
	if err := t.lock(ctx); err != nil {
		return zero, err
	}
	defer t.mu.Unlock()
	v, ok := m[k]
	if !ok {
		return zero, ErrNotFound
	}
	return v, nil
}

// GetMeta implements Table.
func (t *MemoryTable) GetMeta(ctx context.Context, pk string) (Meta, error) {
	if err := t.check(); err != nil {
		return Meta{}, err
	}
	if err := checkPK(pk); err != nil {
		return Meta{}, err
	}
	return lookup(ctx, t, t.meta, pk)
}

// GetLease implements Table.
func (t *MemoryTable) GetLease(ctx context.Context, pk string) (Lease, error) {
	if err := t.check(); err != nil {
		return Lease{}, err
	}
	if err := checkPK(pk); err != nil {
		return Lease{}, err
	}
	return lookup(ctx, t, t.lease, pk)
}

// GetRequest implements Table.
func (t *MemoryTable) GetRequest(ctx context.Context, pk, key string) (Request, error) {
	if err := t.check(); err != nil {
		return Request{}, err
	}
	if err := checkRequestKey(pk, key); err != nil {
		return Request{}, err
	}
	return lookup(ctx, t, t.request, [2]string{pk, key})
}

// GetVersion implements Table.
func (t *MemoryTable) GetVersion(ctx context.Context, pk, id string) (Version, error) {
	if err := t.check(); err != nil {
		return Version{}, err
	}
	if err := checkVersionKey(pk, id); err != nil {
		return Version{}, err
	}
	return lookup(ctx, t, t.version, [2]string{pk, id})
}

// AcquireLease implements Table.
func (t *MemoryTable) AcquireLease(ctx context.Context, in AcquireInput) (Lease, error) {
	if err := t.check(); err != nil {
		return Lease{}, err
	}
	if err := ValidateAcquire(in); err != nil {
		return Lease{}, err
	}
	if err := t.lock(ctx); err != nil {
		return Lease{}, err
	}
	defer t.mu.Unlock()
	var heldErr error
	if cur, ok := t.lease[in.PK]; ok && cur.Held(in.Now) {
		if cur.Token == in.Token {
			return cur, nil // a retried acquire: the lease is already ours
		}
		heldErr = &LeaseHeldError{PK: in.PK, ExpiresAt: cur.ExpiresAt}
	}
	changed := false
	if in.IfMetaNotNewer != nil {
		m, ok := t.meta[in.PK]
		changed = ok && cmpN(m.GeneratedAtN, m.GeneratedAt, in.IfMetaNotNewerN, *in.IfMetaNotNewer) > 0
	}
	if heldErr != nil || changed {
		return Lease{}, AcquireRefused(in, heldErr, changed)
	}
	l := AcquiredLease(in)
	t.setLease(l)
	return l, nil
}

// RefreshLease implements Table.
func (t *MemoryTable) RefreshLease(ctx context.Context, in RefreshInput) (Lease, error) {
	if err := t.check(); err != nil {
		return Lease{}, err
	}
	if err := ValidateRefresh(in); err != nil {
		return Lease{}, err
	}
	if err := t.lock(ctx); err != nil {
		return Lease{}, err
	}
	defer t.mu.Unlock()
	cur, ok := t.lease[in.Lease.PK]
	if !ok || !holds(cur, in.Lease.Token, in.Now) {
		return Lease{}, LeaseLost("refresh", in.Lease.PK)
	}
	cur.ExpiresAt, cur.TTL = in.ExpiresAt, in.TTL
	t.setLease(cur)
	return cur, nil
}

// ReleaseLease implements Table.
func (t *MemoryTable) ReleaseLease(ctx context.Context, lease Lease) error {
	if err := t.check(); err != nil {
		return err
	}
	if err := ValidateLease(lease); err != nil {
		return err
	}
	if err := t.lock(ctx); err != nil {
		return err
	}
	defer t.mu.Unlock()
	cur, ok := t.lease[lease.PK]
	if !ok || cur.Token != lease.Token {
		return LeaseLost("release", lease.PK)
	}
	t.deleteLease(lease.PK)
	return nil
}

// checkLease is the ConditionCheck on LOCK shared by both recipes.
func (t *MemoryTable) checkLease(l Lease, now time.Time) bool {
	cur, ok := t.lease[l.PK]
	return ok && holds(cur, l.Token, now)
}

// checkRequest is the condition on the REQ# update of a publish.
func (t *MemoryTable) checkRequest(pk string, rc *RequestCompletion) bool {
	r, ok := t.request[[2]string{pk, rc.Key}]
	return ok && requestStarted(string(r.Status), r.Hash, rc)
}

func (t *MemoryTable) completeRequest(pk string, rc *RequestCompletion, s3Key string) {
	k := [2]string{pk, rc.Key}
	r := t.request[k]
	r.Status = RequestCompleted
	r.ResultS3Key = s3Key
	t.setRequest(r)
}

// Publish implements Table (recipe A).
func (t *MemoryTable) Publish(ctx context.Context, in PublishInput) error {
	if err := t.check(); err != nil {
		return err
	}
	if err := ValidatePublish(in); err != nil {
		return err
	}
	if err := t.lock(ctx); err != nil {
		return err
	}
	defer t.mu.Unlock()
	pk := in.Lease.PK
	// Items in transaction order: LOCK (conditional delete), META put, [REQ#].
	tx := newTxCheck("publish", pk, 2, in.Request)
	if !t.checkLease(in.Lease, in.Now) {
		tx.fail(0, ErrLeaseLost)
	}
	if in.Monotonic {
		if m, ok := t.meta[pk]; ok && !(m.GeneratedAt < in.Meta.GeneratedAt) {
			tx.fail(1, ErrNotNewer)
		}
	}
	if in.Request != nil && !t.checkRequest(pk, in.Request) {
		tx.failRequest()
	}
	if err := tx.err(); err != nil {
		return err
	}
	m := in.Meta
	m.PK, m.CurrentSK, m.Version = pk, "", 0
	t.setMeta(m)
	t.deleteLease(pk)
	if in.Request != nil {
		t.completeRequest(pk, in.Request, m.S3Key)
	}
	return nil
}

// PublishPointer implements Table (recipe B).
func (t *MemoryTable) PublishPointer(ctx context.Context, in PublishPointerInput) (Meta, error) {
	if err := t.check(); err != nil {
		return Meta{}, err
	}
	if err := ValidatePublishPointer(in); err != nil {
		return Meta{}, err
	}
	if err := t.lock(ctx); err != nil {
		return Meta{}, err
	}
	defer t.mu.Unlock()
	pk := in.Lease.PK
	// Items in transaction order: LOCK (conditional delete), VER# put, META update, [REQ#].
	tx := newTxCheck("publish-pointer", pk, 3, in.Request)
	if !t.checkLease(in.Lease, in.Now) {
		tx.fail(0, ErrLeaseLost)
	}
	if _, ok := t.version[[2]string{pk, in.Version.ID}]; ok {
		tx.fail(1, ErrVersionExists)
	}
	cur, hasMeta := t.meta[pk]
	m := PointerMeta(in)
	if cur.Version != in.ExpectedVersion || (in.Previous != "" && cur.CurrentSK != in.Previous) {
		tx.fail(2, ErrVersionConflict)
	} else if in.Monotonic && hasMeta && !(cur.GeneratedAt < in.Version.GeneratedAt) {
		tx.fail(2, ErrNotNewer)
	}
	if in.Request != nil && !t.checkRequest(pk, in.Request) {
		tx.failRequest()
	}
	if err := tx.err(); err != nil {
		return Meta{}, err
	}
	v := in.Version
	v.PK = pk
	t.setVersion(v)
	t.setMeta(m)
	t.deleteLease(pk)
	if prev, ok := t.version[[2]string{pk, strings.TrimPrefix(in.Previous, VersionSKPrefix)}]; ok && in.Previous != "" && in.Previous != m.CurrentSK {
		prev.TTL = in.PreviousTTL
		t.setVersion(prev)
	}
	if in.Request != nil {
		t.completeRequest(pk, in.Request, v.S3Key)
	}
	return m, nil
}

// BeginRequest implements Table.
func (t *MemoryTable) BeginRequest(ctx context.Context, in BeginRequestInput) (Request, bool, error) {
	if err := t.check(); err != nil {
		return Request{}, false, err
	}
	if err := ValidateBeginRequest(in); err != nil {
		return Request{}, false, err
	}
	if err := t.lock(ctx); err != nil {
		return Request{}, false, err
	}
	defer t.mu.Unlock()
	k := [2]string{in.PK, in.Key}
	cur, ok := t.request[k]
	now := in.Now.Unix()
	live := ok && !(cur.TTL != 0 && cur.TTL <= now)
	if live && !retakable(in, string(cur.Status), cur.Hash) {
		return requestFound(in, cur)
	}
	r := BegunRequest(in)
	t.setRequest(r)
	return r, true, nil
}

// FailRequest implements Table.
func (t *MemoryTable) FailRequest(ctx context.Context, pk, key, hash string) error {
	if err := t.check(); err != nil {
		return err
	}
	if err := ValidateRequestRef(pk, key, hash); err != nil {
		return err
	}
	if err := t.lock(ctx); err != nil {
		return err
	}
	defer t.mu.Unlock()
	k := [2]string{pk, key}
	if !t.checkRequest(pk, &RequestCompletion{Key: key, Hash: hash}) {
		return RequestNotStarted("fail-request", pk)
	}
	r := t.request[k]
	r.Status = RequestFailed
	t.setRequest(r)
	return nil
}

// AbandonRequest implements Table.
func (t *MemoryTable) AbandonRequest(ctx context.Context, pk, key, hash string) error {
	if err := t.check(); err != nil {
		return err
	}
	if err := ValidateRequestRef(pk, key, hash); err != nil {
		return err
	}
	if err := t.lock(ctx); err != nil {
		return err
	}
	defer t.mu.Unlock()
	if !t.checkRequest(pk, &RequestCompletion{Key: key, Hash: hash}) {
		return RequestNotStarted("abandon-request", pk)
	}
	t.deleteRequest(pk, key)
	return nil
}
