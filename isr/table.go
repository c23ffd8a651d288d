package isr

import (
	"context"
	"math/big"
	"time"
)

// Meta is the metadata item (sk "META"): what is currently published for a
// cache key.
type Meta struct {
	PK                string
	S3Key             string // s3_key: body store key of the published body
	GeneratedAt       int64  // generated_at: epoch seconds (floored; exact in GeneratedAtN)
	RevalidateSeconds int64  // revalidate_seconds: freshness window (floored; exact in RevalidateSecondsN)
	ETag              string // etag, "" when absent
	TTL               int64  // ttl: epoch seconds, 0 when absent (GC only)
	CurrentSK         string // current_sk: "VER#<id>" (recipe B), "" when absent
	Version           int64  // version: optimistic version (recipe B), 0 when absent

	// RevalidateMissing reports that revalidate_seconds is in neither
	// META nor the VER# row it points to: a recipe-B writer that sets only
	// current_sk and version (a recipe-A META without it is corrupt). A
	// Table then returns RevalidateSeconds 0; the Coordinator's Lookup and
	// Regenerate (and so the Handler) fill in its default freshness window
	// (WithDefaultRevalidate) and keep this flag set to say so.
	RevalidateMissing bool

	// GeneratedAtN and RevalidateSecondsN are generated_at and
	// revalidate_seconds exactly as stored, in DynamoDB's number text
	// ("1795385591.7", "1.7953855917e9"), as every Table reads them; ""
	// means the int64 field is exact (as in a Meta isr built itself).
	// Fresh, StaleAt and Coordinator.TryAcquire's META guard use the
	// exact values.
	GeneratedAtN       string
	RevalidateSecondsN string
}

// Fresh reports whether the page may be served without regeneration:
// generated_at + revalidate_seconds > now, compared exactly (a fractional
// generated_at such as 1795385591.7 is not floored). TTL never decides.
func (m Meta) Fresh(now time.Time) bool {
	if m.GeneratedAtN == "" && m.RevalidateSecondsN == "" {
		return m.GeneratedAt+m.RevalidateSeconds > now.Unix()
	}
	return m.staleAtRat().Cmp(ratTime(now)) > 0
}

func (m Meta) staleAtRat() *big.Rat {
	sum := ratN(numText(m.GeneratedAtN, m.GeneratedAt))
	return sum.Add(sum, ratN(numText(m.RevalidateSecondsN, m.RevalidateSeconds)))
}

// StaleAt returns the first instant at which the page is no longer fresh
// (generated_at + revalidate_seconds, rounded up to a nanosecond).
func (m Meta) StaleAt() time.Time {
	if m.GeneratedAtN == "" && m.RevalidateSecondsN == "" {
		return time.Unix(m.GeneratedAt+m.RevalidateSeconds, 0)
	}
	ns := m.staleAtRat()
	ns.Mul(ns, big.NewRat(1e9, 1))
	q, r := new(big.Int).QuoRem(ns.Num(), ns.Denom(), new(big.Int))
	if r.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	sec, nsec := new(big.Int).DivMod(q, big.NewInt(1e9), new(big.Int))
	if !sec.IsInt64() {
		return time.Unix(m.GeneratedAt+m.RevalidateSeconds, 0)
	}
	return time.Unix(sec.Int64(), nsec.Int64())
}

// Lease is the lease item (sk "LOCK"): who may publish for a cache key.
type Lease struct {
	PK        string
	Token     string // lease_token: random owner token
	ExpiresAt int64  // lease_expires_at: epoch seconds (floored; exact in ExpiresAtN)
	TTL       int64  // ttl: epoch seconds, >= ExpiresAt + buffer (GC only)
	// ExpiresAtN is lease_expires_at exactly as stored (DynamoDB number
	// text), as every Table reads it; "" means ExpiresAt is exact.
	ExpiresAtN string
}

// Held reports whether the lease is held at now: lease_expires_at > now,
// compared exactly, as AcquireLease decides.
func (l Lease) Held(now time.Time) bool { return cmpNTime(l.ExpiresAtN, l.ExpiresAt, now) > 0 }

// RequestStatus is the status attribute of a REQ# item.
type RequestStatus string

// Request statuses, as stored.
const (
	RequestStarted   RequestStatus = "STARTED"
	RequestCompleted RequestStatus = "COMPLETED"
	RequestFailed    RequestStatus = "FAILED"
)

// Request is a request idempotency item (sk "REQ#<Key>").
type Request struct {
	PK          string
	Key         string        // idempotency key (the sort key without "REQ#")
	Hash        string        // request_hash
	Status      RequestStatus // status
	ResultS3Key string        // result_s3_key, "" when absent
	TTL         int64         // ttl: epoch seconds (GC horizon)
}

// Version is a version item of recipe B (sk "VER#<ID>").
type Version struct {
	PK          string
	ID          string // version id (the sort key without "VER#")
	S3Key       string // s3_key
	GeneratedAt int64  // generated_at: epoch seconds (floored; exact in GeneratedAtN)
	ETag        string // etag, "" when absent
	TTL         int64  // ttl, 0 when absent
	// GeneratedAtN is generated_at exactly as stored; "" means GeneratedAt
	// is exact.
	GeneratedAtN string
}

// AcquireInput is the input of Table.AcquireLease.
type AcquireInput struct {
	PK        string
	Token     string    // new random token; must be non-empty
	Now       time.Time // the caller's clock; the lease is free iff absent or lease_expires_at <= Now (exactly)
	ExpiresAt int64     // lease_expires_at to write; must be > Now
	TTL       int64     // ttl to write; must be >= ExpiresAt
	// IfMetaNotNewer, when non-nil, makes the acquire also require that META
	// is absent or has generated_at <= *IfMetaNotNewer (pass the
	// generated_at the caller saw, 0 when it saw no META). If META is newer,
	// nothing is written and the error matches ErrMetaChanged. This closes
	// the gap between reading a stale META and acquiring the lease, in which
	// another worker may have regenerated and released. On DynamoDB it turns
	// the acquire into a two-item transaction (still one request).
	IfMetaNotNewer *int64
	// IfMetaNotNewerN, when non-empty, is the exact generated_at the caller
	// saw (Meta.GeneratedAtN), compared instead of *IfMetaNotNewer, which
	// must still be non-nil.
	IfMetaNotNewerN string
}

// RefreshInput is the input of Table.RefreshLease.
type RefreshInput struct {
	Lease     Lease     // the caller's lease (PK and Token are used)
	Now       time.Time // refresh only if the lease is still held at Now
	ExpiresAt int64     // new lease_expires_at; must be > Now
	TTL       int64     // new ttl; must be >= ExpiresAt
}

// RequestCompletion marks the caller's REQ# item COMPLETED, with
// result_s3_key set to the published s3_key, in the publish transaction.
type RequestCompletion struct {
	Key  string // idempotency key
	Hash string // request_hash the item must carry (and status STARTED)
}

// PublishInput is the input of Table.Publish (recipe A: in-place META).
type PublishInput struct {
	Lease Lease     // the publisher's lease (PK, Token)
	Now   time.Time // the lease must be held at Now (lease_expires_at > Now)
	Meta  Meta      // the META to put (PK must equal Lease.PK); CurrentSK and Version are ignored
	// Request, when non-nil, completes the REQ# item in the same transaction.
	Request *RequestCompletion
	// Monotonic, when true, also requires META to be absent or have
	// generated_at < Meta.GeneratedAt (ErrNotNewer otherwise).
	Monotonic bool
}

// PublishPointerInput is the input of Table.PublishPointer (recipe B:
// pointer swap).
type PublishPointerInput struct {
	Lease   Lease     // the publisher's lease (PK, Token)
	Now     time.Time // the lease must be held at Now
	Version Version   // the VER# item to put if absent (PK must equal Lease.PK)
	// RevalidateSeconds is written to META with the pointer.
	RevalidateSeconds int64
	// MetaTTL is written to META as ttl when > 0.
	MetaTTL int64
	// ExpectedVersion is META's version the caller regenerated from (0: META
	// absent, without version, or with version 0). The update requires it and writes
	// ExpectedVersion+1; a mismatch is ErrVersionConflict.
	ExpectedVersion int64
	// Request, when non-nil, completes the REQ# item in the same transaction.
	Request *RequestCompletion
	// Monotonic: as in PublishInput.
	Monotonic bool
	// Previous is META's current_sk ("VER#<id>") as the caller read it at
	// ExpectedVersion, "" when META had none. When set, the update also
	// requires META's current_sk to be Previous (ErrVersionConflict
	// otherwise), and the row it names, superseded by this publish, gets
	// ttl PreviousTTL in the same transaction (if it still exists), so the
	// store removes it once that passes instead of keeping every version
	// ever published. Coordinator sets both.
	Previous string
	// PreviousTTL is the ttl written to the Previous row (epoch seconds);
	// must be positive when Previous is set.
	PreviousTTL int64
}

// BeginRequestInput is the input of Table.BeginRequest.
type BeginRequestInput struct {
	PK   string
	Key  string    // idempotency key
	Hash string    // request_hash
	Now  time.Time // a REQ# item whose ttl <= Now counts as absent
	TTL  int64     // ttl of the new item (epoch seconds); must be > Now
	// RetryFailed lets a FAILED item with the same request_hash be taken
	// again (status back to STARTED) instead of returning ErrRequestFailed.
	RetryFailed bool
}

// Table is the storage of the ISR cache table. Every method is one request
// to the store and atomic; expiry is decided with the caller's Now against
// the item's fields, never by whether TTL deletion has run. dynamoisr.Table,
// redisisr.Table, FileTable and MemoryTable implement it with identical
// behaviour, which isrtest.Run checks.
type Table interface {
	// GetMeta returns META, or ErrNotFound.
	GetMeta(ctx context.Context, pk string) (Meta, error)
	// GetLease returns the LOCK item as stored (held or not), or ErrNotFound.
	GetLease(ctx context.Context, pk string) (Lease, error)
	// GetRequest returns the REQ#<key> item, or ErrNotFound.
	GetRequest(ctx context.Context, pk, key string) (Request, error)
	// GetVersion returns the VER#<id> item, or ErrNotFound.
	GetVersion(ctx context.Context, pk, id string) (Version, error)

	// AcquireLease puts LOCK if it is absent or expired (lease_expires_at <=
	// Now). A held lease gives *LeaseHeldError (ErrLeaseHeld); see
	// AcquireInput.IfMetaNotNewer for ErrMetaChanged. A held lease that
	// already carries in.Token (the retry of an acquire whose reply was
	// lost) is returned as stored, without error.
	AcquireLease(ctx context.Context, in AcquireInput) (Lease, error)
	// RefreshLease extends the lease if it carries the token and is held at
	// Now; otherwise ErrLeaseLost.
	RefreshLease(ctx context.Context, in RefreshInput) (Lease, error)
	// ReleaseLease deletes LOCK if it carries the token; otherwise
	// ErrLeaseLost (nothing is deleted). Releasing an expired lease that
	// still carries the token succeeds.
	ReleaseLease(ctx context.Context, lease Lease) error

	// Publish is recipe A, one transaction: condition-check LOCK (token
	// matches and lease_expires_at > Now), put META, delete LOCK, and
	// optionally update REQ# to COMPLETED with result_s3_key. Refusals are
	// *TxError matching ErrLeaseLost, ErrNotNewer, ErrRequestState or
	// ErrConflict.
	Publish(ctx context.Context, in PublishInput) error
	// PublishPointer is recipe B, one transaction: condition-check LOCK, put
	// VER#<id> if absent, update META (current_sk, version+1 with the
	// expected version, denormalised s3_key, etag, generated_at,
	// revalidate_seconds, ttl), delete LOCK, optionally complete REQ#.
	// Refusals are *TxError matching ErrLeaseLost, ErrVersionExists,
	// ErrVersionConflict, ErrNotNewer, ErrRequestState or ErrConflict.
	PublishPointer(ctx context.Context, in PublishPointerInput) (Meta, error)

	// BeginRequest creates REQ#<key> as STARTED with request_hash if it is
	// absent (or its ttl <= Now, or, with RetryFailed, FAILED with the same
	// hash) and returns (item, true). Otherwise it returns the stored item
	// and false, unless the stored hash differs: then *RequestError matching
	// ErrRequestMismatch. Status decisions are the caller's.
	BeginRequest(ctx context.Context, in BeginRequestInput) (Request, bool, error)
	// FailRequest sets a STARTED REQ#<key> with the given hash to FAILED;
	// otherwise ErrRequestState.
	FailRequest(ctx context.Context, pk, key, hash string) error
	// AbandonRequest deletes a STARTED REQ#<key> with the given hash (the
	// caller could not get the lease and did no work); otherwise
	// ErrRequestState.
	AbandonRequest(ctx context.Context, pk, key, hash string) error
}
