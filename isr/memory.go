package isr

import (
	"context"
	"sync"
)

// MemoryTable is an in-process Table with the same behaviour as
// DynamoTable: every method is atomic under one mutex and decides expiry
// with the caller's Now. It is for tests, examples and single-process
// servers. The zero value is not usable; call NewMemoryTable.
type MemoryTable struct {
	mu       sync.Mutex
	meta     map[string]Meta
	lease    map[string]Lease
	request  map[[2]string]Request
	version  map[[2]string]Version
	requests int64
}

// NewMemoryTable returns an empty MemoryTable.
func NewMemoryTable() *MemoryTable {
	return &MemoryTable{
		meta:    map[string]Meta{},
		lease:   map[string]Lease{},
		request: map[[2]string]Request{},
		version: map[[2]string]Version{},
	}
}

var _ Table = (*MemoryTable)(nil)

// Requests returns how many Table calls the MemoryTable has served (each is
// one request to a real store).
func (t *MemoryTable) Requests() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.requests
}

func (t *MemoryTable) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	t.mu.Lock()
	t.requests++
	return nil
}

// GetMeta implements Table.
func (t *MemoryTable) GetMeta(ctx context.Context, pk string) (Meta, error) {
	if err := checkPK(pk); err != nil {
		return Meta{}, err
	}
	if err := t.lock(ctx); err != nil {
		return Meta{}, err
	}
	defer t.mu.Unlock()
	m, ok := t.meta[pk]
	if !ok {
		return Meta{}, ErrNotFound
	}
	return m, nil
}

// GetLease implements Table.
func (t *MemoryTable) GetLease(ctx context.Context, pk string) (Lease, error) {
	if err := checkPK(pk); err != nil {
		return Lease{}, err
	}
	if err := t.lock(ctx); err != nil {
		return Lease{}, err
	}
	defer t.mu.Unlock()
	l, ok := t.lease[pk]
	if !ok {
		return Lease{}, ErrNotFound
	}
	return l, nil
}

// GetRequest implements Table.
func (t *MemoryTable) GetRequest(ctx context.Context, pk, key string) (Request, error) {
	if err := checkPK(pk); err != nil {
		return Request{}, err
	}
	if err := checkPart("idempotency key", key, false); err != nil {
		return Request{}, err
	}
	if err := t.lock(ctx); err != nil {
		return Request{}, err
	}
	defer t.mu.Unlock()
	r, ok := t.request[[2]string{pk, key}]
	if !ok {
		return Request{}, ErrNotFound
	}
	return r, nil
}

// GetVersion implements Table.
func (t *MemoryTable) GetVersion(ctx context.Context, pk, id string) (Version, error) {
	if err := checkPK(pk); err != nil {
		return Version{}, err
	}
	if err := checkPart("version id", id, false); err != nil {
		return Version{}, err
	}
	if err := t.lock(ctx); err != nil {
		return Version{}, err
	}
	defer t.mu.Unlock()
	v, ok := t.version[[2]string{pk, id}]
	if !ok {
		return Version{}, ErrNotFound
	}
	return v, nil
}

// AcquireLease implements Table.
func (t *MemoryTable) AcquireLease(ctx context.Context, in AcquireInput) (Lease, error) {
	if err := validateAcquire(in); err != nil {
		return Lease{}, err
	}
	if err := t.lock(ctx); err != nil {
		return Lease{}, err
	}
	defer t.mu.Unlock()
	now := in.Now.Unix()
	if cur, ok := t.lease[in.PK]; ok && cur.Token == in.Token && cur.ExpiresAt > now {
		return cur, nil // a retried acquire: the lease is already ours
	}
	var errs []error
	reasons := []string{reasonNone}
	if cur, ok := t.lease[in.PK]; ok && cur.ExpiresAt > now {
		errs = append(errs, &LeaseHeldError{PK: in.PK, ExpiresAt: cur.ExpiresAt})
		reasons[0] = reasonCondition
	}
	if in.IfMetaNotNewer != nil {
		reasons = append(reasons, reasonNone)
		if m, ok := t.meta[in.PK]; ok && cmpN(m.GeneratedAtN, m.GeneratedAt, in.IfMetaNotNewerN, *in.IfMetaNotNewer) > 0 {
			errs = append(errs, ErrMetaChanged)
			reasons[1] = reasonCondition
		}
	}
	if len(errs) > 0 {
		if in.IfMetaNotNewer == nil {
			return Lease{}, errs[0]
		}
		return Lease{}, &TxError{Op: "acquire", PK: in.PK, Reasons: reasons, Errors: errs}
	}
	l := Lease{PK: in.PK, Token: in.Token, ExpiresAt: in.ExpiresAt, TTL: in.TTL}
	t.lease[in.PK] = l
	return l, nil
}

// RefreshLease implements Table.
func (t *MemoryTable) RefreshLease(ctx context.Context, in RefreshInput) (Lease, error) {
	if err := validateRefresh(in); err != nil {
		return Lease{}, err
	}
	if err := t.lock(ctx); err != nil {
		return Lease{}, err
	}
	defer t.mu.Unlock()
	cur, ok := t.lease[in.Lease.PK]
	if !ok || cur.Token != in.Lease.Token || cur.ExpiresAt <= in.Now.Unix() {
		return Lease{}, leaseLost("refresh", in.Lease.PK)
	}
	cur.ExpiresAt, cur.TTL = in.ExpiresAt, in.TTL
	t.lease[in.Lease.PK] = cur
	return cur, nil
}

// ReleaseLease implements Table.
func (t *MemoryTable) ReleaseLease(ctx context.Context, lease Lease) error {
	if err := validateLease(lease); err != nil {
		return err
	}
	if err := t.lock(ctx); err != nil {
		return err
	}
	defer t.mu.Unlock()
	cur, ok := t.lease[lease.PK]
	if !ok || cur.Token != lease.Token {
		return leaseLost("release", lease.PK)
	}
	delete(t.lease, lease.PK)
	return nil
}

// checkLease is the ConditionCheck on LOCK shared by both recipes.
func (t *MemoryTable) checkLease(l Lease, now int64) bool {
	cur, ok := t.lease[l.PK]
	return ok && cur.Token == l.Token && cur.ExpiresAt > now
}

// checkRequest is the condition on the REQ# update of a publish.
func (t *MemoryTable) checkRequest(pk string, rc *RequestCompletion) bool {
	r, ok := t.request[[2]string{pk, rc.Key}]
	return ok && r.Status == RequestStarted && r.Hash == rc.Hash
}

func (t *MemoryTable) completeRequest(pk string, rc *RequestCompletion, s3Key string) {
	k := [2]string{pk, rc.Key}
	r := t.request[k]
	r.Status = RequestCompleted
	r.ResultS3Key = s3Key
	t.request[k] = r
}

// Publish implements Table (recipe A).
func (t *MemoryTable) Publish(ctx context.Context, in PublishInput) error {
	if err := validatePublish(in); err != nil {
		return err
	}
	if err := t.lock(ctx); err != nil {
		return err
	}
	defer t.mu.Unlock()
	pk := in.Lease.PK
	now := in.Now.Unix()
	// Items in transaction order: LOCK (conditional delete), META put, [REQ#].
	reasons := []string{reasonNone, reasonNone}
	var errs []error
	if !t.checkLease(in.Lease, now) {
		reasons[0] = reasonCondition
		errs = append(errs, ErrLeaseLost)
	}
	if in.Monotonic {
		if m, ok := t.meta[pk]; ok && !(m.GeneratedAt < in.Meta.GeneratedAt) {
			reasons[1] = reasonCondition
			errs = append(errs, ErrNotNewer)
		}
	}
	if in.Request != nil {
		reasons = append(reasons, reasonNone)
		if !t.checkRequest(pk, in.Request) {
			reasons[2] = reasonCondition
			errs = append(errs, ErrRequestState)
		}
	}
	if len(errs) > 0 {
		return &TxError{Op: "publish", PK: pk, Reasons: reasons, Errors: errs}
	}
	m := in.Meta
	m.PK, m.CurrentSK, m.Version = pk, "", 0
	t.meta[pk] = m
	delete(t.lease, pk)
	if in.Request != nil {
		t.completeRequest(pk, in.Request, m.S3Key)
	}
	return nil
}

// PublishPointer implements Table (recipe B).
func (t *MemoryTable) PublishPointer(ctx context.Context, in PublishPointerInput) (Meta, error) {
	if err := validatePointer(in); err != nil {
		return Meta{}, err
	}
	if err := t.lock(ctx); err != nil {
		return Meta{}, err
	}
	defer t.mu.Unlock()
	pk := in.Lease.PK
	now := in.Now.Unix()
	// Items in transaction order: LOCK (conditional delete), VER# put, META update, [REQ#].
	reasons := []string{reasonNone, reasonNone, reasonNone}
	var errs []error
	if !t.checkLease(in.Lease, now) {
		reasons[0] = reasonCondition
		errs = append(errs, ErrLeaseLost)
	}
	if _, ok := t.version[[2]string{pk, in.Version.ID}]; ok {
		reasons[1] = reasonCondition
		errs = append(errs, ErrVersionExists)
	}
	cur, hasMeta := t.meta[pk]
	m := pointerMeta(pk, in)
	if cur.Version != in.ExpectedVersion {
		reasons[2] = reasonCondition
		errs = append(errs, ErrVersionConflict)
	} else if in.Monotonic && hasMeta && !(cur.GeneratedAt < in.Version.GeneratedAt) {
		reasons[2] = reasonCondition
		errs = append(errs, ErrNotNewer)
	}
	if in.Request != nil {
		reasons = append(reasons, reasonNone)
		if !t.checkRequest(pk, in.Request) {
			reasons[3] = reasonCondition
			errs = append(errs, ErrRequestState)
		}
	}
	if len(errs) > 0 {
		return Meta{}, &TxError{Op: "publish-pointer", PK: pk, Reasons: reasons, Errors: errs}
	}
	v := in.Version
	v.PK = pk
	t.version[[2]string{pk, v.ID}] = v
	t.meta[pk] = m
	delete(t.lease, pk)
	if in.Request != nil {
		t.completeRequest(pk, in.Request, v.S3Key)
	}
	return m, nil
}

// pointerMeta is META after a recipe-B update: every attribute is set from
// the input (etag and ttl removed when empty), so the result does not depend
// on the previous META.
func pointerMeta(pk string, in PublishPointerInput) Meta {
	return Meta{
		PK:                pk,
		S3Key:             in.Version.S3Key,
		GeneratedAt:       in.Version.GeneratedAt,
		RevalidateSeconds: in.RevalidateSeconds,
		ETag:              in.Version.ETag,
		TTL:               in.MetaTTL,
		CurrentSK:         VersionSKPrefix + in.Version.ID,
		Version:           in.ExpectedVersion + 1,
	}
}

// BeginRequest implements Table.
func (t *MemoryTable) BeginRequest(ctx context.Context, in BeginRequestInput) (Request, bool, error) {
	if err := validateBegin(in); err != nil {
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
	if live && !(in.RetryFailed && cur.Status == RequestFailed && cur.Hash == in.Hash) {
		if cur.Hash != in.Hash {
			return Request{}, false, &RequestError{PK: in.PK, Request: cur, Err: ErrRequestMismatch}
		}
		return cur, false, nil
	}
	r := Request{PK: in.PK, Key: in.Key, Hash: in.Hash, Status: RequestStarted, TTL: in.TTL}
	t.request[k] = r
	return r, true, nil
}

// FailRequest implements Table.
func (t *MemoryTable) FailRequest(ctx context.Context, pk, key, hash string) error {
	if err := validateRequestRef(pk, key, hash); err != nil {
		return err
	}
	if err := t.lock(ctx); err != nil {
		return err
	}
	defer t.mu.Unlock()
	k := [2]string{pk, key}
	if !t.checkRequest(pk, &RequestCompletion{Key: key, Hash: hash}) {
		return requestState("fail-request", pk)
	}
	r := t.request[k]
	r.Status = RequestFailed
	t.request[k] = r
	return nil
}

// AbandonRequest implements Table.
func (t *MemoryTable) AbandonRequest(ctx context.Context, pk, key, hash string) error {
	if err := validateRequestRef(pk, key, hash); err != nil {
		return err
	}
	if err := t.lock(ctx); err != nil {
		return err
	}
	defer t.mu.Unlock()
	if !t.checkRequest(pk, &RequestCompletion{Key: key, Hash: hash}) {
		return requestState("abandon-request", pk)
	}
	delete(t.request, [2]string{pk, key})
	return nil
}
