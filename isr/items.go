package isr

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Item is an item of the table: attribute name (pk and sk included) to
// value. Every table that stores items in the schema (DynamoDB, Redis,
// files) reads an item into an Item and writes one from an Item, so all
// tables read and write one schema the same way.
type Item map[string]Attr

// Attr is an attribute value: its type and, for S and N, its text (a
// number in the decimal text DynamoDB accepts, kept exactly as stored).
type Attr struct {
	Type  AttrType
	Value string
}

// AttrType is the type of an attribute value, as DynamoDB names it: TypeS,
// TypeN, or another of DynamoDB's type descriptors (BOOL, NULL, B, SS, NS,
// BS, L, M), which no attribute of the schema holds.
type AttrType string

// The attribute types of the schema.
const (
	TypeS AttrType = "S"
	TypeN AttrType = "N"
)

// goName is the name a *CorruptItemError's reason gives an attribute of
// type t: the AWS SDK's Go type for it, so that one corrupt item reads the
// same on every table.
func (t AttrType) goName() string {
	if t == "" {
		return "*types.UnknownUnionMember"
	}
	return "*types.AttributeValueMember" + string(t)
}

func sAttr(v string) Attr { return Attr{Type: TypeS, Value: v} }
func nAttr(v int64) Attr  { return Attr{Type: TypeN, Value: i64(v)} }

func i64(v int64) string { return strconv.FormatInt(v, 10) }

func key(pk, sk string) Item {
	return Item{AttrPK: sAttr(pk), AttrSK: sAttr(sk)}
}

// numberAttrs are the schema's N attributes; every other attribute is S.
var numberAttrs = map[string]bool{
	AttrGeneratedAt:       true,
	AttrRevalidateSeconds: true,
	AttrTTL:               true,
	AttrVersion:           true,
	AttrLeaseExpiresAt:    true,
}

// nPattern is the decimal text DynamoDB accepts as a number: an optional
// minus sign, digits with an optional fraction, an optional exponent.
var nPattern = regexp.MustCompile(`^-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$`)

// validN reports whether s is a number in DynamoDB's decimal text form,
// with an exponent within ±maxExponent.
func validN(s string) bool { return nPattern.MatchString(s) && exponentOK(s) }

// ItemFromStrings is the item a hash of strings stands for (a Redis hash,
// which keeps every attribute as text): the schema's number attributes as
// N (their text as stored, so a bad one decodes as a corrupt number),
// everything else as S.
func ItemFromStrings(h map[string]string) Item {
	item := make(Item, len(h))
	for k, v := range h {
		if numberAttrs[k] {
			item[k] = Attr{Type: TypeN, Value: v}
		} else {
			item[k] = Attr{Type: TypeS, Value: v}
		}
	}
	return item
}

// pointerSK returns META's current_sk if it has one, checked to name a
// VER# row.
func pointerSK(pk string, meta Item) (string, bool, error) {
	if _, ok := meta[AttrCurrentSK]; !ok {
		return "", false, nil
	}
	cur, err := getS(pk, SKMeta, meta, AttrCurrentSK, true)
	if err != nil {
		return "", false, err
	}
	if !strings.HasPrefix(cur, VersionSKPrefix) || len(cur) == len(VersionSKPrefix) {
		return "", false, &CorruptItemError{PK: pk, SK: SKMeta, Attr: AttrCurrentSK, Reason: "not a VER# sort key: " + strconv.Quote(cur)}
	}
	return cur, true, nil
}

// missingPointer is the error for a current_sk naming a row that does not
// exist.
func missingPointer(pk, cur string) error {
	return &CorruptItemError{PK: pk, SK: SKMeta, Attr: AttrCurrentSK, Reason: "points to a missing row " + strconv.Quote(cur)}
}

// ItemGetter reads one item of a table that stores items in the schema
// (FileTable, and the DynamoDB and Redis tables): its attributes, or
// ErrNotFound. Its methods are the Get methods of Table on it, for every
// such table to read alike.
type ItemGetter func(ctx context.Context, pk, sk string) (Item, error)

// GetMeta is Table.GetMeta on get. Recipe B is served here: META's
// current_sk names the VER# row that is current, and that row's s3_key,
// generated_at and etag (and revalidate_seconds when META has none) are the
// page's. META's own copies may be missing (a writer that sets only the
// pointer, as the recipe's sketch does) or left over from an older recipe-A
// META the pointer was swapped over, so the pointer decides, at the cost of
// one more read.
func (get ItemGetter) GetMeta(ctx context.Context, pk string) (Meta, error) {
	if err := checkPK(pk); err != nil {
		return Meta{}, err
	}
	item, err := get(ctx, pk, SKMeta)
	if err != nil {
		return Meta{}, err
	}
	cur, ok, err := pointerSK(pk, item)
	if err != nil {
		return Meta{}, err
	}
	if ok {
		// VER# rows are written once and never changed, so reading the
		// row after META is as good as reading both at once.
		ver, err := get(ctx, pk, cur)
		if errors.Is(err, ErrNotFound) {
			return Meta{}, missingPointer(pk, cur)
		}
		if err != nil {
			return Meta{}, err
		}
		item = mergePointer(item, ver)
	}
	return decodeMeta(pk, item)
}

// GetLease is Table.GetLease on get.
func (get ItemGetter) GetLease(ctx context.Context, pk string) (Lease, error) {
	if err := checkPK(pk); err != nil {
		return Lease{}, err
	}
	item, err := get(ctx, pk, SKLock)
	if err != nil {
		return Lease{}, err
	}
	return DecodeLease(pk, item)
}

// GetRequest is Table.GetRequest on get.
func (get ItemGetter) GetRequest(ctx context.Context, pk, k string) (Request, error) {
	if err := checkRequestKey(pk, k); err != nil {
		return Request{}, err
	}
	item, err := get(ctx, pk, RequestSKPrefix+k)
	if err != nil {
		return Request{}, err
	}
	return decodeRequest(pk, k, item)
}

// GetVersion is Table.GetVersion on get.
func (get ItemGetter) GetVersion(ctx context.Context, pk, id string) (Version, error) {
	if err := checkVersionKey(pk, id); err != nil {
		return Version{}, err
	}
	item, err := get(ctx, pk, VersionSKPrefix+id)
	if err != nil {
		return Version{}, err
	}
	return decodeVersion(pk, id, item)
}

// mergePointer is META as served under recipe B: the VER# row's s3_key,
// generated_at and etag replace META's (absent in the row means absent),
// and its revalidate_seconds fills in when META has none.
func mergePointer(meta, ver Item) Item {
	merged := make(Item, len(meta)+2)
	for k, v := range meta {
		merged[k] = v
	}
	for _, a := range []string{AttrS3Key, AttrGeneratedAt, AttrETag} {
		if v, ok := ver[a]; ok {
			merged[a] = v
		} else {
			delete(merged, a)
		}
	}
	if _, ok := merged[AttrRevalidateSeconds]; !ok {
		if v, ok := ver[AttrRevalidateSeconds]; ok {
			merged[AttrRevalidateSeconds] = v
		}
	}
	return merged
}

// Items as written. Every table writes these attributes (the Redis table
// through its scripts' arguments in the same shape).

// LeaseItem is the LOCK item of pk as AcquireLease writes it.
func LeaseItem(pk, token string, exp, ttl int64) Item {
	item := key(pk, SKLock)
	item[AttrLeaseToken] = sAttr(token)
	item[AttrLeaseExpiresAt] = nAttr(exp)
	item[AttrTTL] = nAttr(ttl)
	return item
}

// MetaItem is the META item of recipe A as written.
func MetaItem(pk string, m Meta) Item {
	item := key(pk, SKMeta)
	item[AttrS3Key] = sAttr(m.S3Key)
	item[AttrGeneratedAt] = nAttr(m.GeneratedAt)
	item[AttrRevalidateSeconds] = nAttr(m.RevalidateSeconds)
	setOptional(item, m.ETag, m.TTL)
	return item
}

// VersionItem is the VER# item of recipe B as written.
func VersionItem(pk string, v Version) Item {
	item := key(pk, VersionSKPrefix+v.ID)
	item[AttrS3Key] = sAttr(v.S3Key)
	item[AttrGeneratedAt] = nAttr(v.GeneratedAt)
	setOptional(item, v.ETag, v.TTL)
	return item
}

// RequestItem is a new REQ# item as BeginRequest writes it: STARTED.
func RequestItem(in BeginRequestInput) Item {
	item := key(in.PK, RequestSKPrefix+in.Key)
	item[AttrRequestHash] = sAttr(in.Hash)
	item[AttrStatus] = sAttr(string(RequestStarted))
	item[AttrTTL] = nAttr(in.TTL)
	return item
}

// PointerMeta is META after the recipe-B update of in: every attribute is
// set from the input (etag and ttl removed when empty), so the result does
// not depend on the previous META.
func PointerMeta(in PublishPointerInput) Meta {
	return Meta{
		PK:                in.Lease.PK,
		S3Key:             in.Version.S3Key,
		GeneratedAt:       in.Version.GeneratedAt,
		RevalidateSeconds: in.RevalidateSeconds,
		ETag:              in.Version.ETag,
		TTL:               in.MetaTTL,
		CurrentSK:         VersionSKPrefix + in.Version.ID,
		Version:           in.ExpectedVersion + 1,
	}
}

// PointerMetaAttrs returns the META attributes a recipe-B publish sets or
// removes, in the order written.
func PointerMetaAttrs() []string {
	return []string{AttrS3Key, AttrGeneratedAt, AttrRevalidateSeconds, AttrCurrentSK, AttrVersion, AttrETag, AttrTTL}
}

// PointerMetaUpdate is the update of META to m (PointerMeta) by a recipe-B
// publish: the attributes set, and those removed (etag and ttl when m has
// none). META is updated, not replaced: attributes of other writers stay.
func PointerMetaUpdate(m Meta) (set Item, remove []string) {
	set = Item{
		AttrS3Key:             sAttr(m.S3Key),
		AttrGeneratedAt:       nAttr(m.GeneratedAt),
		AttrRevalidateSeconds: nAttr(m.RevalidateSeconds),
		AttrCurrentSK:         sAttr(m.CurrentSK),
		AttrVersion:           nAttr(m.Version),
	}
	setOptional(set, m.ETag, m.TTL)
	for _, a := range []string{AttrETag, AttrTTL} {
		if _, ok := set[a]; !ok {
			remove = append(remove, a)
		}
	}
	return set, remove
}

// PointerNotNewer reports whether META as a refused recipe-B publish found
// it (meta) refused it for its generated_at rather than its version: in is
// Monotonic, and META still has the expected version (and pointer, when in
// names Previous), so only generated_at can have refused.
func PointerNotNewer(in PublishPointerInput, meta Item) bool {
	if !in.Monotonic {
		return false
	}
	pk := in.Lease.PK
	cur, err := decodeMetaLoose(pk, meta)
	sk, _ := getS(pk, SKMeta, meta, AttrCurrentSK, false)
	return err == nil && cur.Version == in.ExpectedVersion && (in.Previous == "" || sk == in.Previous)
}

// setOptional sets etag when non-empty and ttl when positive; both are
// absent otherwise.
func setOptional(item Item, etag string, ttl int64) {
	if etag != "" {
		item[AttrETag] = sAttr(etag)
	}
	if ttl > 0 {
		item[AttrTTL] = nAttr(ttl)
	}
}

// Decisions. The tables that evaluate conditions in Go (FileTable,
// MemoryTable) and those that map a store's refusal (dynamoisr.Table,
// redisisr.Table) build their answers here, so all refuse alike.

// AcquiredLease is the lease AcquireLease returns when it wrote LOCK.
func AcquiredLease(in AcquireInput) Lease {
	return Lease{PK: in.PK, Token: in.Token, ExpiresAt: in.ExpiresAt, TTL: in.TTL}
}

// BegunRequest is the item BeginRequest returns when it wrote REQ#.
func BegunRequest(in BeginRequestInput) Request {
	return Request{PK: in.PK, Key: in.Key, Hash: in.Hash, Status: RequestStarted, TTL: in.TTL}
}

// holds reports whether l carries token and is held at now: the condition
// on LOCK of a refresh and of both publish recipes.
func holds(l Lease, token string, now time.Time) bool {
	return l.Token == token && l.Held(now)
}

// requestStarted reports whether a REQ# item with status and hash is
// STARTED with rc's request_hash: the condition of completing, failing or
// abandoning it.
func requestStarted(status, hash string, rc *RequestCompletion) bool {
	return status == string(RequestStarted) && hash == rc.Hash
}

// retakable reports whether BeginRequest may take a live REQ# item with
// status and hash again: RetryFailed, FAILED, and the same request_hash.
func retakable(in BeginRequestInput, status, hash string) bool {
	return in.RetryFailed && status == string(RequestFailed) && hash == in.Hash
}

// LeaseHeld is AcquireLease's refusal when the LOCK item lock (as the
// refused write found it) is held: a *LeaseHeldError, or the
// *CorruptItemError of a LOCK that cannot be read.
func LeaseHeld(pk string, old Item) error {
	l, err := DecodeLease(pk, old)
	if err != nil && len(old) > 0 {
		// A LOCK the condition refused but that cannot be read (say a
		// lease_expires_at of another type) is corrupt, never "held
		// until 0".
		return err
	}
	return &LeaseHeldError{PK: pk, ExpiresAt: l.ExpiresAt}
}

// AcquireRefused is AcquireLease's refusal when LOCK is held by another
// token (heldErr non-nil) or META changed: heldErr alone for a plain
// acquire; with IfMetaNotNewer, a *TxError over LOCK and META.
func AcquireRefused(in AcquireInput, heldErr error, changed bool) error {
	if in.IfMetaNotNewer == nil {
		return heldErr
	}
	te := &TxError{Op: "acquire", PK: in.PK, Reasons: []string{ReasonNone, ReasonNone}}
	if heldErr != nil {
		te.Reasons[0] = ReasonConditionalCheckFailed
		te.Errors = append(te.Errors, heldErr)
	}
	if changed {
		te.Reasons[1] = ReasonConditionalCheckFailed
		te.Errors = append(te.Errors, ErrMetaChanged)
	}
	return te
}

// requestFound is BeginRequest's answer when a live REQ# item stopped it:
// the item, or a mismatch when it carries another request_hash.
func requestFound(in BeginRequestInput, cur Request) (Request, bool, error) {
	if cur.Hash != in.Hash {
		return Request{}, false, &RequestError{PK: in.PK, Request: cur, Err: ErrRequestMismatch}
	}
	return cur, false, nil
}

// ExistingRequest is BeginRequest's answer when the live REQ# item item
// stopped it: the item and false, or a *RequestError matching
// ErrRequestMismatch when it carries another request_hash.
func ExistingRequest(in BeginRequestInput, item Item) (Request, bool, error) {
	cur, err := decodeRequest(in.PK, in.Key, item)
	if err != nil {
		return Request{}, false, err
	}
	return requestFound(in, cur)
}

// txCheck collects the conditions of a transaction evaluated in Go, item by
// item in transaction order, into the *TxError a refused one returns.
type txCheck struct {
	te TxError
}

// newTxCheck starts a transaction of op on pk with items items, plus one
// for the REQ# completion when rc is non-nil (always the last item).
func newTxCheck(op, pk string, items int, rc *RequestCompletion) *txCheck {
	if rc != nil {
		items++
	}
	c := &txCheck{te: TxError{Op: op, PK: pk, Reasons: make([]string, items)}}
	for i := range c.te.Reasons {
		c.te.Reasons[i] = ReasonNone
	}
	return c
}

// fail records that item i's condition failed with err.
func (c *txCheck) fail(i int, err error) {
	c.te.Reasons[i] = ReasonConditionalCheckFailed
	c.te.Errors = append(c.te.Errors, err)
}

// failRequest records that the REQ# completion's condition failed.
func (c *txCheck) failRequest() { c.fail(len(c.te.Reasons)-1, ErrRequestState) }

// err is the transaction's refusal, or nil when every condition held.
func (c *txCheck) err() error {
	if len(c.te.Errors) == 0 {
		return nil
	}
	te := c.te
	return &te
}

// PublishRefusal is the error of recipe A's transaction item i (LOCK,
// META, REQ#) refused by its condition.
func PublishRefusal(i int) error {
	switch i {
	case 0:
		return ErrLeaseLost
	case 1:
		return ErrNotNewer
	default:
		return ErrRequestState
	}
}

// PointerRefusal is the error of recipe B's transaction item i (LOCK,
// VER#, META, REQ#) refused by its condition; notNewer tells that META was
// refused for its generated_at, not its version.
func PointerRefusal(i int, notNewer bool) error {
	switch i {
	case 0:
		return ErrLeaseLost
	case 1:
		return ErrVersionExists
	case 2:
		if notNewer {
			return ErrNotNewer
		}
		return ErrVersionConflict
	default:
		return ErrRequestState
	}
}

// collectable reports whether the clean-up of a table isr keeps (files,
// memory) may remove an item at now, the rule DynamoDB's TTL deletion
// follows: its ttl has passed (ttl <= now; an absent or unreadable ttl
// never passes). A LOCK is removed only once its lease has expired too
// (lease_expires_at <= now), so a held lease is never removed whatever
// ttl another writer gave it.
func collectable(sk string, item Item, now time.Time) bool {
	v, ok := item[AttrTTL]
	if !ok || v.Type != TypeN {
		return false
	}
	ttl, err := parseN("", "", AttrTTL, v.Value)
	if err != nil || ttl <= 0 || cmpNTime(v.Value, ttl, now) > 0 {
		return false
	}
	if sk == SKLock {
		exp, ok := item[AttrLeaseExpiresAt]
		if ok && exp.Type == TypeN {
			e, err := parseN("", "", AttrLeaseExpiresAt, exp.Value)
			if err == nil && cmpNTime(exp.Value, e, now) > 0 {
				return false
			}
		}
	}
	return true
}
