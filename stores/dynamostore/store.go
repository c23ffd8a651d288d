package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/storekit"
)

// Client is the part of the DynamoDB API the store and CreateTable use.
// *dynamodb.Client implements it; tests wrap it for fault injection.
type Client interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
}

// Store is an idem.Store kept in one DynamoDB table. It is safe for
// concurrent use by many goroutines and processes.
type Store struct {
	client Client
	table  string
	cfg    config
	err    error
}

var _ idem.Store = (*Store)(nil)

// New returns a store over table. It does no I/O. An invalid option, an
// empty table name or a nil client is an *OptionError matching
// idem.ErrInvalidOption.
func New(client Client, table string, opts ...Option) (*Store, error) {
	s := &Store{client: client, table: table, cfg: defaultConfig()}
	for _, o := range opts {
		if o == nil {
			s.cfg.fail("Option", "nil option")
			continue
		}
		o(&s.cfg)
	}
	switch {
	case s.cfg.err != nil:
		s.err = s.cfg.err
	case client == nil:
		s.err = &OptionError{Option: "client", Reason: "nil client"}
	case table == "":
		s.err = &OptionError{Option: "table", Reason: "empty table name"}
	}
	if s.err != nil {
		return nil, s.err
	}
	return s, nil
}

// Validate reports an invalid configuration without doing any I/O: a store
// returned by New is valid; a nil or zero Store is not.
func (st *Store) Validate() error {
	if st == nil || st.client == nil {
		return &OptionError{Option: "store", Reason: "nil store (use dynamostore.New)"}
	}
	return st.err
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

	encodingVersion = 1
)

var recordAttrs = map[string]bool{
	attrVersion: true, attrStatus: true, attrNonce: true, attrAttempt: true,
	attrPayloadHash: true, attrStartedAt: true, attrHeartbeatAt: true,
	attrCompletedAt: true, attrExpiresAt: true, attrResult: true,
	attrErrMessage: true, attrErrType: true, attrTTL: true,
	attrTakeoverMs: true, attrStaleAt: true,
}

// Expression attribute name placeholders; every request names the
// attributes it uses (status, result and ttl are reserved words).
var placeholder = map[string]string{
	"#v": attrVersion, "#st": attrStatus, "#n": attrNonce, "#a": attrAttempt,
	"#ph": attrPayloadHash, "#sa": attrStartedAt, "#hb": attrHeartbeatAt,
	"#ca": attrCompletedAt, "#ea": attrExpiresAt, "#res": attrResult,
	"#em": attrErrMessage, "#et": attrErrType, "#ttl": attrTTL,
	"#tm": attrTakeoverMs, "#sta": attrStaleAt,
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
func attrB(v []byte) types.AttributeValue             { return &types.AttributeValueMemberB{Value: v} }
func statusValue(st idem.Status) types.AttributeValue { return attrS(string(st)) }

// begin checks the configuration and the key and returns the item key.
func (st *Store) begin(op, key string) (map[string]types.AttributeValue, error) {
	if st.err != nil {
		return nil, st.err
	}
	if key == "" {
		return nil, &idem.KeyError{Reason: "empty storage key"}
	}
	pk := st.cfg.prefix + key
	if len(pk) > maxPartitionKeyBytes {
		return nil, &idem.KeyError{Reason: fmt.Sprintf("storage key longer than %d bytes", maxPartitionKeyBytes)}
	}
	k := map[string]types.AttributeValue{st.cfg.pk: attrS(pk)}
	if st.cfg.sk != "" {
		k[st.cfg.sk] = attrS(st.cfg.skValue)
	}
	return k, nil
}

func (st *Store) nowMs() int64 { return st.cfg.now().UnixMilli() }

// ttlAt is the ttl attribute for a record that stops counting at expiresAt
// (Unix ms): epoch seconds, rounded up, plus the buffer.
func (st *Store) ttlAt(expiresAt int64) int64 {
	sec := expiresAt / 1000
	if expiresAt%1000 > 0 {
		sec++
	}
	return sec + int64(st.cfg.retention/time.Second)
}

func storeErr(op string, err error) error {
	var api smithy.APIError
	permanent := errors.As(err, &api) && api.ErrorCode() == "ValidationException" // e.g. an item over 400 KB
	return &idem.StoreError{Op: op, Err: err, Permanent: permanent}
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

// ErrContention is returned (wrapped in *idem.StoreError) when Claim keeps
// losing races on a key it tries to take over.
var ErrContention = errors.New("dynamostore: claim kept losing to concurrent writes")

// Claim implements idem.Store: one conditional UpdateItem (see the package
// documentation).
func (st *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.ClaimResult, error) {
	key, err := st.begin("claim", req.Key)
	if err != nil {
		return idem.ClaimResult{}, err
	}
	if req.Nonce == "" {
		return idem.ClaimResult{}, storeErr("claim", errors.New("empty nonce"))
	}
	for range maxClaimRounds {
		now := st.nowMs()
		exp := now + req.LeaseTTL.Milliseconds()
		out, err := st.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(st.table),
			Key:       key,
			UpdateExpression: aws.String("SET #st = :ip, #ph = :ph, #n = :n, " +
				"#a = if_not_exists(#a, :zero) + :one, #sa = :now, #hb = :now, " +
				"#ea = :exp, #ttl = :ttl, #v = :v, #tm = :tm, #sta = :sta REMOVE #res, #em, #et, #ca"),
			// A takeover replaces a live item, so it also asks for the
			// attributes it keeps or could misread to be of this encoding
			// (version, nonce, attempt, start): a live item that is not is
			// refused and reported as corrupt instead of overwritten.
			// Staleness is judged by the owner's stored threshold
			// (stale_at = heartbeat_at + takeover_ms; expressions have no
			// arithmetic), or by the caller's for an item without one.
			ConditionExpression: aws.String("attribute_not_exists(#pk) OR #ea <= :now OR " +
				"(#st = :ip AND ((attribute_exists(#tm) AND #sta <= :now) OR (attribute_not_exists(#tm) AND #hb <= :stale)) AND #ph = :ph AND #n <> :n AND #ea <= :exp AND #v = :v AND " +
				"attribute_type(#n, :S) AND attribute_type(#a, :N) AND attribute_type(#sa, :N))"),
			ExpressionAttributeNames: st.names("#pk", "#st", "#ph", "#n", "#a", "#sa", "#hb",
				"#ea", "#ttl", "#v", "#res", "#em", "#et", "#ca", "#tm", "#sta"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":ip": statusValue(idem.StatusInProgress), ":ph": attrS(req.PayloadHash),
				":n": attrS(req.Nonce), ":zero": attrN(0), ":one": attrN(1), ":now": attrN(now),
				":exp": attrN(exp), ":ttl": attrN(st.ttlAt(exp)), ":v": attrN(encodingVersion),
				":stale": attrN(now - req.TakeoverAfter.Milliseconds()),
				":tm":    attrN(req.TakeoverAfter.Milliseconds()),
				":sta":   attrN(now + req.TakeoverAfter.Milliseconds()),
				":S":     attrS("S"), ":N": attrS("N"),
			},
			ReturnValues:                        types.ReturnValueAllOld,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			return st.claimed(req, out.Attributes, now, exp)
		}
		old, refused := conditionFailed(err)
		if !refused {
			if isValidation(err) {
				// An expired item passed the condition but its attempt is
				// not a number: report the item rather than the request.
				if cerr := st.checkDecodable(ctx, key, req.Key); cerr != nil {
					return idem.ClaimResult{}, cerr
				}
			}
			return idem.ClaimResult{}, storeErr("claim", err)
		}
		if old == nil {
			// The condition refuses only an existing item, so a refusal
			// without it means the endpoint ignored ALL_OLD.
			return idem.ClaimResult{}, storeErr("claim", errors.New("conditional check failed without the existing item (ReturnValuesOnConditionCheckFailure unsupported?)"))
		}
		cur, err := st.decode(req.Key, old)
		if err != nil {
			return idem.ClaimResult{}, err
		}
		res := storekit.DecideClaim(cur, req, now).Result()
		switch {
		case res.Outcome == idem.Existing:
			return res, nil
		case res.Outcome == idem.Claimed && cur.Live(now) && cur.Nonce == req.Nonce:
			// A retried claim whose first try was applied.
			return res, nil
		case res.Outcome == idem.TookOver:
			// Stale, but its expiry is later than ours: keep it.
			rec, err := st.takeOverKeepingExpiry(ctx, key, cur, req, now)
			if err != nil {
				return idem.ClaimResult{}, err
			}
			if rec != nil {
				return idem.ClaimResult{Outcome: idem.TookOver, Record: rec}, nil
			}
		}
		// The record changed between the condition and our decision, or the
		// compare-and-swap lost: decide again.
	}
	return idem.ClaimResult{}, storeErr("claim", ErrContention)
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
func (st *Store) claimed(req idem.ClaimRequest, old map[string]types.AttributeValue, now, exp int64) (idem.ClaimResult, error) {
	rec := &idem.Record{
		Key: req.Key, Status: idem.StatusInProgress, PayloadHash: req.PayloadHash,
		Nonce: req.Nonce, Attempt: 1, StartedAt: now, HeartbeatAt: now, ExpiresAt: exp,
		TakeoverMs: req.TakeoverAfter.Milliseconds(),
	}
	if len(old) == 0 {
		return idem.ClaimResult{Outcome: idem.Claimed, Record: rec}, nil
	}
	// The update succeeded, so an old attempt, if any, was a number (the
	// server added one to it) and old expires_at was a number (the
	// condition compared it).
	if _, ok := old[attrAttempt]; ok {
		a, err := numAttr(old, attrAttempt)
		if err != nil {
			return idem.ClaimResult{}, &idem.CorruptRecordError{Key: req.Key, Err: err}
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
		return idem.ClaimResult{Outcome: idem.TookOver, Record: rec}, nil
	}
	return idem.ClaimResult{Outcome: idem.Claimed, Record: rec}, nil
}

// takeOverKeepingExpiry takes over cur, a stale claim whose expiry is later
// than now + lease, keeping that expiry. It is a compare-and-swap on the
// nonce, heartbeat and expiry seen; it returns nil, nil when it lost.
func (st *Store) takeOverKeepingExpiry(ctx context.Context, key map[string]types.AttributeValue, cur *idem.Record, req idem.ClaimRequest, now int64) (*idem.Record, error) {
	out, err := st.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(st.table),
		Key:                      key,
		UpdateExpression:         aws.String("SET #n = :n, #a = #a + :one, #sa = :now, #hb = :now, #tm = :tm, #sta = :sta"),
		ConditionExpression:      aws.String("#n = :old AND #st = :ip AND #hb = :oldhb AND #ea = :oldea AND #ph = :ph"),
		ExpressionAttributeNames: st.names("#n", "#a", "#sa", "#hb", "#st", "#ea", "#ph", "#tm", "#sta"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":tm": attrN(req.TakeoverAfter.Milliseconds()), ":sta": attrN(now + req.TakeoverAfter.Milliseconds()),
			":n": attrS(req.Nonce), ":one": attrN(1), ":now": attrN(now), ":old": attrS(cur.Nonce),
			":ip": statusValue(idem.StatusInProgress), ":oldhb": attrN(cur.HeartbeatAt),
			":oldea": attrN(cur.ExpiresAt), ":ph": attrS(req.PayloadHash),
		},
		ReturnValues: types.ReturnValueAllNew,
	})
	if err != nil {
		if _, refused := conditionFailed(err); refused {
			return nil, nil
		}
		return nil, storeErr("claim", err)
	}
	return st.decode(req.Key, out.Attributes)
}

// Heartbeat implements idem.Store.
func (st *Store) Heartbeat(ctx context.Context, key, nonce string, leaseTTL time.Duration) error {
	k, err := st.begin("heartbeat", key)
	if err != nil {
		return err
	}
	now := st.nowMs()
	exp := now + leaseTTL.Milliseconds()
	_, err = st.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                st.tableName(),
		Key:                      k,
		UpdateExpression:         aws.String("SET #hb = :now, #sta = :now + if_not_exists(#tm, :zero), #ea = :exp, #ttl = :ttl"),
		ConditionExpression:      aws.String("#n = :n AND #st = :ip AND #ea > :now AND #ea <= :exp"),
		ExpressionAttributeNames: st.names("#hb", "#ea", "#ttl", "#n", "#st", "#sta", "#tm"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":now": attrN(now), ":exp": attrN(exp), ":ttl": attrN(st.ttlAt(exp)), ":n": attrS(nonce),
			":ip": statusValue(idem.StatusInProgress), ":zero": attrN(0),
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
	if strAttrOr(old, attrNonce) != nonce || strAttrOr(old, attrStatus) != string(idem.StatusInProgress) || !liveAfter(old, now) {
		return lost("heartbeat")
	}
	// Still ours, with an expiry later than now + leaseTTL: keep it and
	// refresh the heartbeat only.
	_, err = st.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                st.tableName(),
		Key:                      k,
		UpdateExpression:         aws.String("SET #hb = :now, #sta = :now + if_not_exists(#tm, :zero)"),
		ConditionExpression:      aws.String("#n = :n AND #st = :ip AND #ea > :now"),
		ExpressionAttributeNames: st.names("#hb", "#n", "#st", "#ea", "#sta", "#tm"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":now": attrN(now), ":n": attrS(nonce), ":ip": statusValue(idem.StatusInProgress), ":zero": attrN(0),
		},
	})
	return st.ownershipErr("heartbeat", err)
}

// Complete implements idem.Store.
func (st *Store) Complete(ctx context.Context, key, nonce string, c idem.Completion) error {
	k, err := st.begin("complete", key)
	if err != nil {
		return err
	}
	switch {
	case c.Status != idem.StatusCompleted && c.Status != idem.StatusFailed:
		return storeErr("complete", fmt.Errorf("completion status %q is not completed or failed", c.Status))
	case c.Status == idem.StatusFailed && c.Error == nil:
		return storeErr("complete", errors.New("failed completion without error"))
	}
	now := st.nowMs()
	exp := now + c.TTL.Milliseconds()
	set := "SET #st = :st, #ca = :now, #hb = :now, #ea = :exp, #ttl = :ttl"
	remove := ""
	ph := []string{"#st", "#ca", "#hb", "#ea", "#ttl", "#n", "#res"}
	vals := map[string]types.AttributeValue{
		":st": statusValue(c.Status), ":now": attrN(now), ":exp": attrN(exp),
		":ttl": attrN(st.ttlAt(exp)), ":n": attrS(nonce),
	}
	if c.Result != nil {
		set += ", #res = :res"
		vals[":res"] = attrB(c.Result)
	} else {
		remove = " REMOVE #res"
	}
	ph = append(ph, "#em", "#et")
	if c.Error != nil {
		set += ", #em = :em, #et = :et"
		vals[":em"], vals[":et"] = attrS(c.Error.Message), attrS(c.Error.Type)
	} else if remove == "" {
		remove = " REMOVE #em, #et"
	} else {
		remove += ", #em, #et"
	}
	_, err = st.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                 st.tableName(),
		Key:                       k,
		UpdateExpression:          aws.String(set + remove),
		ConditionExpression:       aws.String("#n = :n"),
		ExpressionAttributeNames:  st.names(ph...),
		ExpressionAttributeValues: vals,
	})
	return st.ownershipErr("complete", err)
}

// Release implements idem.Store: the record stays, with expires_at = now,
// so the next claim continues its attempt numbers.
func (st *Store) Release(ctx context.Context, key, nonce string) error {
	k, err := st.begin("release", key)
	if err != nil {
		return err
	}
	now := st.nowMs()
	_, err = st.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                st.tableName(),
		Key:                      k,
		UpdateExpression:         aws.String("SET #ea = :now, #ttl = :ttl"),
		ConditionExpression:      aws.String("#n = :n AND #st = :ip"),
		ExpressionAttributeNames: st.names("#ea", "#ttl", "#n", "#st"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":now": attrN(now), ":ttl": attrN(st.ttlAt(now)), ":n": attrS(nonce),
			":ip": statusValue(idem.StatusInProgress),
		},
	})
	return st.ownershipErr("release", err)
}

// Get implements idem.Store with a strongly consistent read.
func (st *Store) Get(ctx context.Context, key string) (*idem.Record, error) {
	k, err := st.begin("get", key)
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
	if len(out.Item) == 0 {
		return nil, idem.ErrNotFound
	}
	rec, err := st.decode(key, out.Item)
	if err != nil {
		return nil, err
	}
	if !rec.Live(st.nowMs()) {
		return nil, idem.ErrNotFound
	}
	return rec, nil
}

// Delete implements idem.Store.
func (st *Store) Delete(ctx context.Context, key string) error {
	k, err := st.begin("delete", key)
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
	return fmt.Errorf("dynamostore: %s: %w", op, idem.ErrLostOwnership)
}
