package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/idem-go/idem/storekit"
)

// Client is the part of the DynamoDB API the store, CreateTable and DoTx
// use.
// *dynamodb.Client implements it; tests wrap it for fault injection.
type Client interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// Store is an storekit.Store kept in one DynamoDB table. It is safe for
// concurrent use by many goroutines and processes.
type Store struct {
	client Client
	table  string
	cfg    config

	// Expression attribute names of the requests that name the partition
	// key, built once: requests only read them.
	pkName, reclaimNames map[string]string

	released releasedKeys
}

// releasedKeys remembers, boundedly, the keys this store released: their
// records stay (expired), so the next claim of one, typically the retry
// after a failure under idem.Unlock, goes straight to the update rather
// than to a PutItem that would be refused. It is a hint only: either
// request is correct for any state of the item.
type releasedKeys struct {
	mu   sync.Mutex
	keys map[string]struct{}
}

const maxReleasedKeys = 4096

func (r *releasedKeys) add(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.keys == nil || len(r.keys) >= maxReleasedKeys {
		r.keys = make(map[string]struct{})
	}
	r.keys[key] = struct{}{}
}

// take reports whether key was released, and forgets it.
func (r *releasedKeys) take(key string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.keys[key]
	if ok {
		delete(r.keys, key)
	}
	return ok
}

var _ storekit.Store = (*Store)(nil)

// New returns a store over table. It does no I/O. A nil client, an empty
// table name and every invalid option are reported, joined, each an
// *storekit.OptionError matching storekit.ErrInvalidOption.
func New(client Client, table string, opts ...Option) (*Store, error) {
	cfg, err := newConfig("New", client, table, opts)
	if err != nil {
		return nil, err
	}
	s := &Store{client: client, table: table, cfg: cfg}
	s.pkName = map[string]string{"#pk": s.cfg.pk}
	s.reclaimNames = s.names("#pk", "#st", "#ph", "#n", "#a", "#sa", "#hb",
		"#ea", "#ttl", "#v", "#res", "#em", "#et", "#ca", "#tm", "#sta", "#ow")
	return s, nil
}

// Validate reports an invalid configuration without doing any I/O: a store
// returned by New is valid; a nil or zero Store is not.
func (st *Store) Validate() error {
	if st == nil || st.client == nil {
		return &storekit.OptionError{Option: "dynamostore.Store", Reason: "nil or zero Store: use dynamostore.New"}
	}
	return nil
}

// Table returns the table name.
func (st *Store) Table() string { return st.table }

// Record attribute names.
const (
	attrVersion     = "record_version"
	attrStatus      = "status"
	attrNonce       = "nonce"
	attrAttempt     = "attempt"
	attrPayloadHash = "payload_hash"
	attrStartedAt   = "started_at"
	attrHeartbeatAt = "heartbeat_at"
	attrCompletedAt = "completed_at"
	attrExpiresAt   = "expires_at"
	attrResult      = "result"
	attrErrMessage  = "error_message"
	attrErrType     = "error_type"
	attrTTL         = "ttl"
	attrTakeoverMs  = "takeover_ms" // the owner's takeover threshold
	attrStaleAt     = "stale_at"    // heartbeat_at + takeover_ms
	attrOwner       = "owner"       // ClaimRequest.Owner; absent when "" (and in older records)

	encodingVersion = 1
)

var recordAttrs = map[string]bool{
	attrVersion: true, attrStatus: true, attrNonce: true, attrAttempt: true,
	attrPayloadHash: true, attrStartedAt: true, attrHeartbeatAt: true,
	attrCompletedAt: true, attrExpiresAt: true, attrResult: true,
	attrErrMessage: true, attrErrType: true, attrTTL: true,
	attrTakeoverMs: true, attrStaleAt: true, attrOwner: true,
}

// Expression attribute name placeholders; every request names the
// attributes it uses (status, result and ttl are reserved words).
var placeholder = map[string]string{
	"#v": attrVersion, "#st": attrStatus, "#n": attrNonce, "#a": attrAttempt,
	"#ph": attrPayloadHash, "#sa": attrStartedAt, "#hb": attrHeartbeatAt,
	"#ca": attrCompletedAt, "#ea": attrExpiresAt, "#res": attrResult,
	"#em": attrErrMessage, "#et": attrErrType, "#ttl": attrTTL,
	"#tm": attrTakeoverMs, "#sta": attrStaleAt, "#ow": attrOwner,
}

// The expressions, and the names and values every request of a kind shares.
// The SDK only reads them, so they are built once.
var (
	exprAbsent = "attribute_not_exists(#pk)"
	// exprReclaim[hasOwner]: a claim without an owner removes the old one.
	exprReclaim = [2]string{
		reclaimSet + " REMOVE #res, #em, #et, #ca, #ow",
		reclaimSet + ", #ow = :ow REMOVE #res, #em, #et, #ca",
	}
	// exprReclaimCond[hasInstance]: an item whose attempt is the largest
	// int64, or whose takeover_ms is negative, is refused: it is corrupt
	// (storekit.CheckRecord), and the claim reports it instead of writing
	// over it. A live in-progress claim with our payload hash is taken
	// over when it is stale (stale_at <= now) or, for a claim whose owner
	// names an instance, when its owner is an earlier incarnation of that
	// instance (storekit.EarlierIncarnation: it starts with :inst but not
	// with :inc).
	exprReclaimCond = [2]string{
		reclaimCond("#sta <= :now"),
		reclaimCond("(#sta <= :now OR (begins_with(#ow, :inst) AND NOT begins_with(#ow, :inc)))"),
	}

	// Complete: one update expression for each combination of result and
	// stored error; every one uses all of completeNames.
	exprCompleteCond = "#n = :n"
	exprComplete     = [2][2]string{ // [has result][has error]
		{completeSet + " REMOVE #res, #em, #et", completeSet + ", #em = :em, #et = :et REMOVE #res"},
		{completeSet + ", #res = :res REMOVE #em, #et", completeSet + ", #res = :res, #em = :em, #et = :et"},
	}
	completeNames = placeholders("#st", "#ca", "#hb", "#ea", "#ttl", "#n", "#res", "#em", "#et")

	exprHeartbeat       = "SET #hb = :now, #sta = :now + #tm, #ea = :exp, #ttl = :ttl"
	exprHeartbeatCond   = "#n = :n AND #st = :ip AND #ea > :now AND #ea <= :exp"
	heartbeatNames      = placeholders("#hb", "#ea", "#ttl", "#n", "#st", "#sta", "#tm")
	exprHeartbeatOnly   = "SET #hb = :now, #sta = :now + #tm"
	exprHeartbeatLive   = "#n = :n AND #st = :ip AND #ea > :now"
	heartbeatOnlyNames  = placeholders("#hb", "#n", "#st", "#ea", "#sta", "#tm")
	exprRelease         = "SET #ea = :zero, #ttl = :ttl"
	exprReleaseCond     = "#n = :n AND #st = :ip"
	releaseNames        = placeholders("#ea", "#ttl", "#n", "#st")
	exprTakeover        = [2]string{takeoverSet + " REMOVE #ow", takeoverSet + ", #ow = :ow"} // [hasOwner]
	exprTakeoverCond    = "#n = :old AND #st = :ip AND #hb = :oldhb AND #ea = :oldea AND #ph = :ph"
	takeoverNames       = placeholders("#n", "#a", "#sa", "#hb", "#st", "#ea", "#ph", "#tm", "#sta", "#ow")
	inProgressValue     = statusValue(storekit.StatusInProgress)
	versionValue        = attrN(encodingVersion)
	zeroValue, oneValue = attrN(0), attrN(1)
	maxAttemptValue     = attrN(math.MaxInt64)
	typeSValue          = attrS("S")
	typeNValue          = attrS("N")
)

const (
	completeSet = "SET #st = :st, #ca = :now, #hb = :now, #ea = :exp, #ttl = :ttl"
	reclaimSet  = "SET #st = :ip, #ph = :ph, #n = :n, " +
		"#a = if_not_exists(#a, :zero) + :one, #sa = :now, #hb = :now, " +
		"#ea = :exp, #ttl = :ttl, #v = :v, #tm = :tm, #sta = :sta"
	takeoverSet = "SET #n = :n, #a = #a + :one, #sa = :now, #hb = :now, #tm = :tm, #sta = :sta"
)

// reclaimCond is the condition of the reclaiming update: no item, an
// expired one, or a live in-progress claim with our payload hash, of this
// encoding, that may be taken over (takeover, an expression on the item).
func reclaimCond(takeover string) string {
	return "attribute_not_exists(#pk) OR (#ea <= :now AND (attribute_not_exists(#a) OR NOT attribute_type(#a, :N) OR #a < :maxa)) OR " +
		"(#st = :ip AND " + takeover + " AND #ph = :ph AND #n <> :n AND #ea <= :exp AND #v = :v AND " +
		"attribute_type(#n, :S) AND attribute_type(#a, :N) AND attribute_type(#sa, :N) AND #a < :maxa AND " +
		"(attribute_not_exists(#tm) OR #tm >= :zero))"
}

// placeholders returns the expression attribute names of record attributes.
func placeholders(ph ...string) map[string]string {
	m := make(map[string]string, len(ph))
	for _, p := range ph {
		m[p] = placeholder[p]
	}
	return m
}

func (st *Store) names(ph ...string) map[string]string {
	m := make(map[string]string, len(ph))
	for _, p := range ph {
		if p == "#pk" {
			m[p] = st.cfg.pk
			continue
		}
		m[p] = placeholder[p]
	}
	return m
}

func attrS(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func attrN(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}
func attrB(v []byte) types.AttributeValue                 { return &types.AttributeValueMemberB{Value: v} }
func statusValue(st storekit.Status) types.AttributeValue { return attrS(string(st)) }

// begin checks the configuration and the request and returns the item
// key. check is the verdict of the storekit check of the request (which
// checks the key first); a key that does not fit the partition key with
// the prefix is refused after it. Nothing is sent for a refused request.
func (st *Store) begin(op, key string, check error) (map[string]types.AttributeValue, error) {
	if err := st.Validate(); err != nil {
		return nil, err
	}
	if check != nil {
		return nil, fmt.Errorf("dynamostore: %s: %w", op, check)
	}
	pk := st.cfg.prefix + key
	if len(pk) > maxPartitionKeyBytes {
		return nil, fmt.Errorf("dynamostore: %s: %w", op,
			&storekit.KeyError{Reason: fmt.Sprintf("storage key longer than %d bytes with the prefix", maxPartitionKeyBytes)})
	}
	k := map[string]types.AttributeValue{st.cfg.pk: attrS(pk)}
	if st.cfg.sk != "" {
		k[st.cfg.sk] = attrS(st.cfg.skValue)
	}
	return k, nil
}

func (st *Store) nowMs() int64 { return st.cfg.Now().UnixMilli() }

// ttlAt is the ttl attribute for a record that stops counting at expiresAt
// (Unix ms): epoch seconds, rounded up, plus the buffer.
func (st *Store) ttlAt(expiresAt int64) int64 {
	sec := expiresAt / 1000
	if expiresAt%1000 > 0 {
		sec++
	}
	return sec + int64(st.cfg.Retention/time.Second)
}

func storeErr(op string, err error) error {
	var api smithy.APIError
	permanent := errors.As(err, &api) && api.ErrorCode() == "ValidationException" // e.g. an item over 400 KB
	return &storekit.StoreError{Op: op, Err: err, Permanent: permanent}
}

// conditionFailed reports whether err is a refused condition, and returns
// the old item it carries (nil unless ALL_OLD was asked for and the item
// exists).
func conditionFailed(err error) (map[string]types.AttributeValue, bool) {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return ccf.Item, true
	}
	return nil, false
}

// maxClaimRounds bounds how often Claim starts over after a concurrent
// change foiled its compare-and-swap; each round means another caller made
// progress on the key.
const maxClaimRounds = 8

// ErrContention is returned (wrapped in *storekit.StoreError) when Claim keeps
// losing races on a key it tries to take over.
var ErrContention = errors.New("dynamostore: claim kept losing to concurrent writes")

// Claim implements storekit.Store (see docs/dynamostore.md): one
// conditional PutItem that creates the record when the key has none, and
// whose refusal carries the existing record (ALL_OLD), so a fresh claim and
// a duplicate are one request each. Only an expired, released or stale
// record (or one it cannot read) takes the second path: a conditional
// UpdateItem that keeps the attempt number monotonic.
func (st *Store) Claim(ctx context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, error) {
	key, err := st.begin("claim", req.Key, storekit.ValidateClaim(req))
	if err != nil {
		return storekit.ClaimResult{}, err
	}
	if st.released.take(req.Key) {
		return st.claimExisting(ctx, key, req, nil)
	}
	now := st.nowMs()
	exp := now + req.LeaseTTL.Milliseconds()
	_, err = st.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           &st.table,
		Item:                                st.claimItem(key, req, now, exp),
		ConditionExpression:                 &exprAbsent,
		ExpressionAttributeNames:            st.pkName,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return storekit.ClaimResult{Outcome: storekit.Claimed, Record: &storekit.Record{
			Key: req.Key, Status: storekit.StatusInProgress, PayloadHash: req.PayloadHash,
			Nonce: req.Nonce, Attempt: 1, StartedAt: now, HeartbeatAt: now, ExpiresAt: exp,
			TakeoverMs: req.TakeoverAfter.Milliseconds(), Owner: req.Owner,
		}}, nil
	}
	old, refused := conditionFailed(err)
	if !refused {
		return storekit.ClaimResult{}, storeErr("claim", err)
	}
	if old == nil {
		// The condition refuses only an existing item, so a refusal
		// without it means the endpoint ignored ALL_OLD.
		return storekit.ClaimResult{}, errNoOldItem()
	}
	cur, err := st.decode(req.Key, old)
	if err != nil {
		// Unreadable: the update's condition decides whether it may be
		// overwritten (expired) or is reported (live).
		return st.claimExisting(ctx, key, req, nil)
	}
	// storekit.DecideClaim takes over a live claim of an earlier
	// incarnation of req.Owner's instance, as the update's condition does.
	if d := storekit.DecideClaim(cur, req, now); !d.Write {
		// A live record: another claim's (Existing), or this one's, whose
		// first try was applied (Claimed).
		return d.Result(), nil
	}
	return st.claimExisting(ctx, key, req, cur)
}

// errNoOldItem is the error of a refused claim that did not carry the
// existing item.
func errNoOldItem() error {
	return storeErr("claim", errors.New("conditional check failed without the existing item (ReturnValuesOnConditionCheckFailure unsupported?)"))
}

// claimItem is the item of a first claim.
func (st *Store) claimItem(key map[string]types.AttributeValue, req storekit.ClaimRequest, now, exp int64) map[string]types.AttributeValue {
	item := make(map[string]types.AttributeValue, len(key)+12)
	for k, v := range key {
		item[k] = v
	}
	nowN := attrN(now)
	tm := req.TakeoverAfter.Milliseconds()
	item[attrVersion] = versionValue
	item[attrStatus] = inProgressValue
	item[attrNonce] = attrS(req.Nonce)
	item[attrAttempt] = oneValue
	item[attrPayloadHash] = attrS(req.PayloadHash)
	item[attrStartedAt] = nowN
	item[attrHeartbeatAt] = nowN
	item[attrExpiresAt] = attrN(exp)
	item[attrTTL] = attrN(st.ttlAt(exp))
	item[attrTakeoverMs] = attrN(tm)
	item[attrStaleAt] = attrN(now + tm)
	if req.Owner != "" {
		item[attrOwner] = attrS(req.Owner)
	}
	return item
}

// claimExisting claims a key that has a record: cur as the refused PutItem
// returned it, or nil if it could not be decoded. It is one conditional
// UpdateItem, or, for a stale claim whose expiry is later than ours, a
// compare-and-swap that keeps that expiry; a concurrent change makes it
// decide again.
func (st *Store) claimExisting(ctx context.Context, key map[string]types.AttributeValue, req storekit.ClaimRequest, cur *storekit.Record) (storekit.ClaimResult, error) {
	for range maxClaimRounds {
		now := st.nowMs()
		exp := now + req.LeaseTTL.Milliseconds()
		if cur != nil && cur.Live(now) && cur.ExpiresAt > exp {
			if d := storekit.DecideClaim(cur, req, now); d.Outcome == storekit.TookOver {
				// Stale (or its owner gone), but its expiry is later than
				// ours: keep it.
				rec, err := st.takeOverKeepingExpiry(ctx, key, cur, req, now)
				if err != nil {
					return storekit.ClaimResult{}, err
				}
				if rec != nil {
					return storekit.ClaimResult{Outcome: storekit.TookOver, Record: rec, OwnerGone: d.OwnerGone}, nil
				}
			}
		}
		cur = nil
		out, err := st.client.UpdateItem(ctx, st.reclaimInput(key, req, now, exp))
		if err == nil {
			return st.claimed(req, out.Attributes, now, exp)
		}
		old, refused := conditionFailed(err)
		if !refused {
			if isValidation(err) {
				// An expired item passed the condition but its attempt is
				// not a number: report the item rather than the request.
				if cerr := st.checkDecodable(ctx, key, req.Key); cerr != nil {
					return storekit.ClaimResult{}, cerr
				}
			}
			return storekit.ClaimResult{}, storeErr("claim", err)
		}
		if old == nil {
			return storekit.ClaimResult{}, errNoOldItem()
		}
		if cur, err = st.decode(req.Key, old); err != nil {
			return storekit.ClaimResult{}, err
		}
		if d := storekit.DecideClaim(cur, req, now); !d.Write {
			return d.Result(), nil
		}
		// A stale claim with a later expiry (taken over at the top of the
		// next round), or the record changed between the condition and our
		// decision: decide again.
	}
	return storekit.ClaimResult{}, storeErr("claim", ErrContention)
}

// reclaimInput is the conditional UpdateItem that claims a key whose item
// is missing, expired, or a live claim that may be taken over.
func (st *Store) reclaimInput(key map[string]types.AttributeValue, req storekit.ClaimRequest, now, exp int64) *dynamodb.UpdateItemInput {
	vals := map[string]types.AttributeValue{
		":ip": inProgressValue, ":ph": attrS(req.PayloadHash),
		":n": attrS(req.Nonce), ":zero": zeroValue, ":one": oneValue, ":now": attrN(now),
		":exp": attrN(exp), ":ttl": attrN(st.ttlAt(exp)), ":v": versionValue,
		":tm":  attrN(req.TakeoverAfter.Milliseconds()),
		":sta": attrN(now + req.TakeoverAfter.Milliseconds()),
		":S":   typeSValue, ":N": typeNValue, ":maxa": maxAttemptValue,
	}
	hasOwner, hasInstance := 0, 0
	if req.Owner != "" {
		hasOwner = 1
		vals[":ow"] = attrS(req.Owner)
	}
	if inst, inc := storekit.OwnerPrefixes(req.Owner); inst != "" {
		hasInstance = 1
		vals[":inst"], vals[":inc"] = attrS(inst), attrS(inc)
	}
	return &dynamodb.UpdateItemInput{
		TableName:        &st.table,
		Key:              key,
		UpdateExpression: &exprReclaim[hasOwner],
		// A takeover replaces a live item, so it also asks for the
		// attributes it keeps or could misread to be of this encoding
		// (version, nonce, attempt, start): a live item that is not is
		// refused and reported as corrupt instead of overwritten.
		// Staleness is judged by the owner's stored threshold (stale_at =
		// heartbeat_at + takeover_ms; expressions have no arithmetic).
		ConditionExpression:                 &exprReclaimCond[hasInstance],
		ExpressionAttributeNames:            st.reclaimNames,
		ExpressionAttributeValues:           vals,
		ReturnValues:                        types.ReturnValueAllOld,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// checkDecodable reads the item behind key and returns its decoding error,
// if it has one.
func (st *Store) checkDecodable(ctx context.Context, key map[string]types.AttributeValue, storageKey string) error {
	out, err := st.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName: st.tableName(), Key: key, ConsistentRead: aws.Bool(true),
	})
	if err != nil || len(out.Item) == 0 {
		return nil
	}
	_, err = st.decode(storageKey, out.Item)
	return err
}

func isValidation(err error) bool {
	var ae smithy.APIError
	return errors.As(err, &ae) && ae.ErrorCode() == "ValidationException"
}

// claimed builds the result of an applied claim from the old item the
// update returned.
func (st *Store) claimed(req storekit.ClaimRequest, old map[string]types.AttributeValue, now, exp int64) (storekit.ClaimResult, error) {
	rec := &storekit.Record{
		Key: req.Key, Status: storekit.StatusInProgress, PayloadHash: req.PayloadHash,
		Nonce: req.Nonce, Attempt: 1, StartedAt: now, HeartbeatAt: now, ExpiresAt: exp,
		TakeoverMs: req.TakeoverAfter.Milliseconds(), Owner: req.Owner,
	}
	if len(old) == 0 {
		return storekit.ClaimResult{Outcome: storekit.Claimed, Record: rec}, nil
	}
	// The update succeeded, so an old attempt, if any, was a number (the
	// server added one to it) and old expires_at was a number (the
	// condition compared it).
	if _, ok := old[attrAttempt]; ok {
		a, err := numAttr(old, attrAttempt)
		if err != nil {
			return storekit.ClaimResult{}, &storekit.CorruptRecordError{Key: req.Key, Err: err}
		}
		rec.Attempt = a + 1
	}
	// The outcome only needs to know whether the old record was live; the
	// server compared expires_at as a number, so compare it the same way
	// even when it was not an integer.
	var oldExp float64
	if nv, ok := old[attrExpiresAt].(*types.AttributeValueMemberN); ok {
		oldExp, _ = strconv.ParseFloat(nv.Value, 64)
	}
	if oldExp > float64(now) {
		// A live claim the condition let us take: stale (stale_at <= now),
		// or else its owner was an earlier incarnation of ours.
		staleAt, err := numAttr(old, attrStaleAt)
		gone := err != nil || staleAt > now
		return storekit.ClaimResult{Outcome: storekit.TookOver, Record: rec, OwnerGone: gone}, nil
	}
	return storekit.ClaimResult{Outcome: storekit.Claimed, Record: rec}, nil
}

// takeOverKeepingExpiry takes over cur, a stale claim whose expiry is later
// than now + lease, keeping that expiry. It is a compare-and-swap on the
// nonce, heartbeat and expiry seen; it returns nil, nil when it lost.
func (st *Store) takeOverKeepingExpiry(ctx context.Context, key map[string]types.AttributeValue, cur *storekit.Record, req storekit.ClaimRequest, now int64) (*storekit.Record, error) {
	vals := map[string]types.AttributeValue{
		":tm": attrN(req.TakeoverAfter.Milliseconds()), ":sta": attrN(now + req.TakeoverAfter.Milliseconds()),
		":n": attrS(req.Nonce), ":one": oneValue, ":now": attrN(now), ":old": attrS(cur.Nonce),
		":ip": inProgressValue, ":oldhb": attrN(cur.HeartbeatAt),
		":oldea": attrN(cur.ExpiresAt), ":ph": attrS(req.PayloadHash),
	}
	hasOwner := 0
	if req.Owner != "" {
		hasOwner = 1
		vals[":ow"] = attrS(req.Owner)
	}
	// The nonce names the claim cur is, owner included: the decision
	// taken on cur holds while the item carries it.
	out, err := st.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &st.table,
		Key:                       key,
		UpdateExpression:          &exprTakeover[hasOwner],
		ConditionExpression:       &exprTakeoverCond,
		ExpressionAttributeNames:  takeoverNames,
		ExpressionAttributeValues: vals,
		ReturnValues:              types.ReturnValueAllNew,
	})
	if err != nil {
		if _, refused := conditionFailed(err); refused {
			return nil, nil
		}
		return nil, storeErr("claim", err)
	}
	return st.decode(req.Key, out.Attributes)
}

// Heartbeat implements storekit.Store.
func (st *Store) Heartbeat(ctx context.Context, key, nonce string, leaseTTL time.Duration) error {
	k, err := st.begin("heartbeat", key, storekit.ValidateOwner(key, nonce))
	if err != nil {
		return err
	}
	now := st.nowMs()
	exp := now + leaseTTL.Milliseconds()
	nowN, n := attrN(now), attrS(nonce)
	_, err = st.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                &st.table,
		Key:                      k,
		UpdateExpression:         &exprHeartbeat,
		ConditionExpression:      &exprHeartbeatCond,
		ExpressionAttributeNames: heartbeatNames,
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":now": nowN, ":exp": attrN(exp), ":ttl": attrN(st.ttlAt(exp)), ":n": n,
			":ip": inProgressValue,
		},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return nil
	}
	old, refused := conditionFailed(err)
	if !refused {
		return storeErr("heartbeat", err)
	}
	// Refused: not ours (storekit.ApplyHeartbeat's rule), or ours with an
	// expiry later than now + leaseTTL.
	var cur *storekit.Record
	if len(old) > 0 {
		if cur, err = st.decode(key, old); err != nil {
			return err
		}
	}
	if _, err := storekit.ApplyHeartbeat(cur, nonce, leaseTTL, now); err != nil {
		return lost("heartbeat")
	}
	// Still ours, with an expiry later than now + leaseTTL: keep it and
	// refresh the heartbeat only.
	_, err = st.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                &st.table,
		Key:                      k,
		UpdateExpression:         &exprHeartbeatOnly,
		ConditionExpression:      &exprHeartbeatLive,
		ExpressionAttributeNames: heartbeatOnlyNames,
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":now": nowN, ":n": n, ":ip": inProgressValue,
		},
	})
	return st.ownershipErr("heartbeat", err)
}

// Complete implements storekit.Store.
func (st *Store) Complete(ctx context.Context, key, nonce string, c storekit.Completion) error {
	k, err := st.begin("complete", key, storekit.ValidateOwner(key, nonce))
	if err != nil {
		return err
	}
	if err := storekit.ValidateCompletion(c); err != nil {
		return fmt.Errorf("dynamostore: complete: %w", err)
	}
	now := st.nowMs()
	exp := now + c.TTL.Milliseconds()
	vals := make(map[string]types.AttributeValue, 8)
	vals[":st"], vals[":now"], vals[":exp"] = statusValue(c.Status), attrN(now), attrN(exp)
	vals[":ttl"], vals[":n"] = attrN(st.ttlAt(exp)), attrS(nonce)
	hasResult, hasError := 0, 0
	if c.Result != nil {
		hasResult = 1
		vals[":res"] = attrB(c.Result)
	}
	if c.Error != nil {
		hasError = 1
		vals[":em"], vals[":et"] = attrS(c.Error.Message), attrS(c.Error.Type)
	}
	_, err = st.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 &st.table,
		Key:                       k,
		UpdateExpression:          &exprComplete[hasResult][hasError],
		ConditionExpression:       &exprCompleteCond,
		ExpressionAttributeNames:  completeNames,
		ExpressionAttributeValues: vals,
	})
	return st.ownershipErr("complete", err)
}

// Release implements storekit.Store: the record stays, so the next claim
// continues its attempt numbers, with expires_at = 0: not live at anyone's
// clock, so a heartbeat of the old owner whose clock reading predates the
// release cannot find it live and revive it (its ttl still keeps it for
// the retention).
func (st *Store) Release(ctx context.Context, key, nonce string) error {
	k, err := st.begin("release", key, storekit.ValidateOwner(key, nonce))
	if err != nil {
		return err
	}
	now := st.nowMs()
	_, err = st.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                &st.table,
		Key:                      k,
		UpdateExpression:         &exprRelease,
		ConditionExpression:      &exprReleaseCond,
		ExpressionAttributeNames: releaseNames,
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":zero": zeroValue, ":ttl": attrN(st.ttlAt(now)), ":n": attrS(nonce), ":ip": inProgressValue,
		},
	})
	if err == nil {
		st.released.add(key)
	}
	return st.ownershipErr("release", err)
}

// Get implements storekit.Store with a strongly consistent read.
func (st *Store) Get(ctx context.Context, key string) (*storekit.Record, error) {
	k, err := st.begin("get", key, storekit.ValidateKey(key))
	if err != nil {
		return nil, err
	}
	out, err := st.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      st.tableName(),
		Key:            k,
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, storeErr("get", err)
	}
	var rec *storekit.Record
	if len(out.Item) > 0 {
		if rec, err = st.decode(key, out.Item); err != nil {
			return nil, err
		}
	}
	return storekit.Found(rec, st.nowMs())
}

// Delete implements storekit.Store.
func (st *Store) Delete(ctx context.Context, key string) error {
	k, err := st.begin("delete", key, storekit.ValidateKey(key))
	if err != nil {
		return err
	}
	if _, err := st.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName: st.tableName(),
		Key:       k,
	}); err != nil {
		return storeErr("delete", err)
	}
	return nil
}

func (st *Store) tableName() *string { return aws.String(st.table) }

func (st *Store) ownershipErr(op string, err error) error {
	if err == nil {
		return nil
	}
	if _, refused := conditionFailed(err); refused {
		return lost(op)
	}
	return storeErr(op, err)
}

// lost is the error of a write refused because the nonce (or status) no
// longer matches.
func lost(op string) error {
	return fmt.Errorf("dynamostore: %s: %w", op, storekit.ErrLostOwnership)
}
