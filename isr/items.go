package isr

import (
	"context"
	"errors"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The Redis and file tables keep every item with the DynamoDB item's
// attribute names. An item read from either is turned into the DynamoDB
// attribute map it stands for and decoded by the same functions as a
// DynamoDB item, so all tables read one schema the same way.

// numberAttrs are the schema's N attributes; every other attribute is S.
var numberAttrs = map[string]bool{
	attrGeneratedAt: true,
	attrRevalidate:  true,
	attrTTL:         true,
	attrVersion:     true,
	attrLeaseExp:    true,
}

// nPattern is the decimal text DynamoDB accepts as a number: an optional
// minus sign, digits with an optional fraction, an optional exponent.
var nPattern = regexp.MustCompile(`^-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$`)

// validN reports whether s is a number in DynamoDB's decimal text form,
// with an exponent within ±maxExponent.
func validN(s string) bool { return nPattern.MatchString(s) && exponentOK(s) }

// attrsFromStrings is the DynamoDB item a Redis hash stands for: the
// schema's number attributes as N (their text as stored, so a bad one
// decodes as a corrupt number), everything else as S.
func attrsFromStrings(h map[string]string) map[string]types.AttributeValue {
	item := make(map[string]types.AttributeValue, len(h))
	for k, v := range h {
		if numberAttrs[k] {
			item[k] = &types.AttributeValueMemberN{Value: v}
		} else {
			item[k] = &types.AttributeValueMemberS{Value: v}
		}
	}
	return item
}

// pointerSK returns META's current_sk if it has one, checked to name a
// VER# row.
func pointerSK(pk string, meta map[string]types.AttributeValue) (string, bool, error) {
	if _, ok := meta[attrCurrentSK]; !ok {
		return "", false, nil
	}
	cur, err := getS(pk, SKMeta, meta, attrCurrentSK, true)
	if err != nil {
		return "", false, err
	}
	if !strings.HasPrefix(cur, VersionSKPrefix) || len(cur) == len(VersionSKPrefix) {
		return "", false, &CorruptItemError{PK: pk, SK: SKMeta, Attr: attrCurrentSK, Reason: "not a VER# sort key: " + strconv.Quote(cur)}
	}
	return cur, true, nil
}

// missingPointer is the error for a current_sk naming a row that does not
// exist.
func missingPointer(pk, cur string) error {
	return &CorruptItemError{PK: pk, SK: SKMeta, Attr: attrCurrentSK, Reason: "points to a missing row " + strconv.Quote(cur)}
}

// itemGetter reads one item of a table that stores items in the schema
// (DynamoTable, RedisTable, FileTable): its attributes, or ErrNotFound.
type itemGetter func(ctx context.Context, pk, sk string) (map[string]types.AttributeValue, error)

// getMeta is Table.GetMeta on get. Recipe B is served here: META's
// current_sk names the VER# row that is current, and that row's s3_key,
// generated_at and etag (and revalidate_seconds when META has none) are the
// page's. META's own copies may be missing (a writer that sets only the
// pointer, as the recipe's sketch does) or left over from an older recipe-A
// META the pointer was swapped over, so the pointer decides, at the cost of
// one more read.
func getMeta(ctx context.Context, get itemGetter, pk string) (Meta, error) {
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

// getLease is Table.GetLease on get.
func getLease(ctx context.Context, get itemGetter, pk string) (Lease, error) {
	if err := checkPK(pk); err != nil {
		return Lease{}, err
	}
	item, err := get(ctx, pk, SKLock)
	if err != nil {
		return Lease{}, err
	}
	return decodeLease(pk, item)
}

// getRequest is Table.GetRequest on get.
func getRequest(ctx context.Context, get itemGetter, pk, k string) (Request, error) {
	if err := checkRequestKey(pk, k); err != nil {
		return Request{}, err
	}
	item, err := get(ctx, pk, RequestSKPrefix+k)
	if err != nil {
		return Request{}, err
	}
	return decodeRequest(pk, k, item)
}

// getVersion is Table.GetVersion on get.
func getVersion(ctx context.Context, get itemGetter, pk, id string) (Version, error) {
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
func mergePointer(meta, ver map[string]types.AttributeValue) map[string]types.AttributeValue {
	merged := make(map[string]types.AttributeValue, len(meta)+2)
	for k, v := range meta {
		merged[k] = v
	}
	for _, a := range []string{attrS3Key, attrGeneratedAt, attrETag} {
		if v, ok := ver[a]; ok {
			merged[a] = v
		} else {
			delete(merged, a)
		}
	}
	if _, ok := merged[attrRevalidate]; !ok {
		if v, ok := ver[attrRevalidate]; ok {
			merged[attrRevalidate] = v
		}
	}
	return merged
}

// Items as written. Every table writes these attributes (RedisTable
// through its scripts' arguments in the same shape).

// leaseItem is the LOCK item as written.
func leaseItem(pk, token string, exp, ttl int64) map[string]types.AttributeValue {
	item := key(pk, SKLock)
	item[attrLeaseToken] = sAttr(token)
	item[attrLeaseExp] = nAttr(exp)
	item[attrTTL] = nAttr(ttl)
	return item
}

// metaItem is the META item of recipe A as written.
func metaItem(pk string, m Meta) map[string]types.AttributeValue {
	item := key(pk, SKMeta)
	item[attrS3Key] = sAttr(m.S3Key)
	item[attrGeneratedAt] = nAttr(m.GeneratedAt)
	item[attrRevalidate] = nAttr(m.RevalidateSeconds)
	setOptional(item, m.ETag, m.TTL)
	return item
}

// versionItem is the VER# item of recipe B as written.
func versionItem(pk string, v Version) map[string]types.AttributeValue {
	item := key(pk, VersionSKPrefix+v.ID)
	item[attrS3Key] = sAttr(v.S3Key)
	item[attrGeneratedAt] = nAttr(v.GeneratedAt)
	setOptional(item, v.ETag, v.TTL)
	return item
}

// requestItem is a new REQ# item as BeginRequest writes it: STARTED.
func requestItem(in BeginRequestInput) map[string]types.AttributeValue {
	item := key(in.PK, RequestSKPrefix+in.Key)
	item[attrRequestHash] = sAttr(in.Hash)
	item[attrStatus] = sAttr(string(RequestStarted))
	item[attrTTL] = nAttr(in.TTL)
	return item
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

// pointerMetaAttrs are the META attributes a recipe-B publish sets or
// removes, in the order written.
var pointerMetaAttrs = []string{attrS3Key, attrGeneratedAt, attrRevalidate, attrCurrentSK, attrVersion, attrETag, attrTTL}

// pointerMetaUpdate is the update of META to m (pointerMeta) by a recipe-B
// publish: the attributes set, and those removed (etag and ttl when m has
// none). META is updated, not replaced: attributes of other writers stay.
func pointerMetaUpdate(m Meta) (set map[string]types.AttributeValue, remove []string) {
	set = map[string]types.AttributeValue{
		attrS3Key:       sAttr(m.S3Key),
		attrGeneratedAt: nAttr(m.GeneratedAt),
		attrRevalidate:  nAttr(m.RevalidateSeconds),
		attrCurrentSK:   sAttr(m.CurrentSK),
		attrVersion:     nAttr(m.Version),
	}
	setOptional(set, m.ETag, m.TTL)
	for _, a := range []string{attrETag, attrTTL} {
		if _, ok := set[a]; !ok {
			remove = append(remove, a)
		}
	}
	return set, remove
}

// setOptional sets etag when non-empty and ttl when positive; both are
// absent otherwise.
func setOptional(item map[string]types.AttributeValue, etag string, ttl int64) {
	if etag != "" {
		item[attrETag] = sAttr(etag)
	}
	if ttl > 0 {
		item[attrTTL] = nAttr(ttl)
	}
}

// Decisions. The tables that evaluate conditions in Go (FileTable,
// MemoryTable) and those that map a store's refusal (DynamoTable,
// RedisTable) build their answers here, so all refuse alike.

// newLease is the lease AcquireLease returns when it wrote LOCK.
func newLease(in AcquireInput) Lease {
	return Lease{PK: in.PK, Token: in.Token, ExpiresAt: in.ExpiresAt, TTL: in.TTL}
}

// newRequest is the item BeginRequest returns when it wrote REQ#.
func newRequest(in BeginRequestInput) Request {
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

// acquireRefused is AcquireLease's refusal when LOCK is held by another
// token (heldErr non-nil) or META changed: heldErr alone for a plain
// acquire; with IfMetaNotNewer, a *TxError over LOCK and META.
func acquireRefused(in AcquireInput, heldErr error, changed bool) error {
	if in.IfMetaNotNewer == nil {
		return heldErr
	}
	te := &TxError{Op: "acquire", PK: in.PK, Reasons: []string{reasonNone, reasonNone}}
	if heldErr != nil {
		te.Reasons[0] = reasonCondition
		te.Errors = append(te.Errors, heldErr)
	}
	if changed {
		te.Reasons[1] = reasonCondition
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

// existingRequest is requestFound on the stored item.
func existingRequest(in BeginRequestInput, item map[string]types.AttributeValue) (Request, bool, error) {
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
		c.te.Reasons[i] = reasonNone
	}
	return c
}

// fail records that item i's condition failed with err.
func (c *txCheck) fail(i int, err error) {
	c.te.Reasons[i] = reasonCondition
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

// publishRefusal is the error of recipe A's transaction item i (LOCK,
// META, REQ#) refused by its condition.
func publishRefusal(i int) error {
	switch i {
	case 0:
		return ErrLeaseLost
	case 1:
		return ErrNotNewer
	default:
		return ErrRequestState
	}
}

// pointerRefusal is the error of recipe B's transaction item i (LOCK,
// VER#, META, REQ#) refused by its condition; notNewer tells that META was
// refused for its generated_at, not its version.
func pointerRefusal(i int, notNewer bool) error {
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
func collectable(sk string, item map[string]types.AttributeValue, now time.Time) bool {
	v, ok := item[attrTTL].(*types.AttributeValueMemberN)
	if !ok {
		return false
	}
	ttl, err := parseN("", "", attrTTL, v.Value)
	if err != nil || ttl <= 0 || cmpNTime(v.Value, ttl, now) > 0 {
		return false
	}
	if sk == SKLock {
		exp, ok := item[attrLeaseExp].(*types.AttributeValueMemberN)
		if ok {
			e, err := parseN("", "", attrLeaseExp, exp.Value)
			if err == nil && cmpNTime(exp.Value, e, now) > 0 {
				return false
			}
		}
	}
	return true
}
