package isr

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-go/idem/storekit"
)

// DynamoAPI is the subset of *dynamodb.Client that DynamoTable uses, so
// tests can wrap it.
type DynamoAPI interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// CreateTableAPI is the subset of *dynamodb.Client that CreateTable uses.
type CreateTableAPI interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// Attribute names of the schema.
const (
	attrPK          = "pk"
	attrSK          = "sk"
	attrS3Key       = "s3_key"
	attrGeneratedAt = "generated_at"
	attrRevalidate  = "revalidate_seconds"
	attrETag        = "etag"
	attrTTL         = "ttl"
	attrCurrentSK   = "current_sk"
	attrVersion     = "version"
	attrLeaseToken  = "lease_token"
	attrLeaseExp    = "lease_expires_at"
	attrRequestHash = "request_hash"
	attrStatus      = "status"
	attrResultS3Key = "result_s3_key"
)

// DynamoTable is a Table on a DynamoDB table with the ISR schema. Reads are
// strongly consistent; every write is one conditional request or one
// TransactWriteItems. It does no I/O until used.
type DynamoTable struct {
	client DynamoAPI
	table  string
}

var _ Table = (*DynamoTable)(nil)

// NewDynamoTable returns a DynamoTable on table. It does no I/O. An empty
// table name means FACETHEORY_CACHE_TABLE_NAME. A nil client and a missing
// table name are reported, joined, each an *idem.OptionError matching
// idem.ErrInvalidOption.
func NewDynamoTable(client DynamoAPI, table string) (*DynamoTable, error) {
	errs := storekit.Options{Store: "isr"}
	if client == nil {
		errs.Invalid("NewDynamoTable", "DynamoDB client is nil")
	}
	if table == "" {
		name, err := TableNameFromEnv()
		if err != nil {
			errs.Invalid("NewDynamoTable", "table name is empty and %s is not set", EnvTableName)
		}
		table = name
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	return &DynamoTable{client: client, table: table}, nil
}

// check refuses a DynamoTable that NewDynamoTable did not make.
func (t *DynamoTable) check() error {
	if t == nil || t.client == nil || t.table == "" {
		return unmade("DynamoTable", "NewDynamoTable")
	}
	return nil
}

// Name returns the table name ("" for a nil DynamoTable).
func (t *DynamoTable) Name() string {
	if t == nil {
		return ""
	}
	return t.table
}

// CreateTable creates a table with the ISR shape (pk S hash key, sk S range
// key, on-demand billing), waits until it is active, and turns on
// DynamoDB's TTL deletion on the ttl attribute, so expired LOCK, REQ# and
// superseded VER# items are removed by the server (see the package doc's
// Lifecycle section); correctness never depends on it. It is idempotent:
// an existing table is waited for, not an error, and its TTL turned on
// unless it already is (on another attribute: an error, since isr's items
// would then never be removed).
func CreateTable(ctx context.Context, client CreateTableAPI, table string) error {
	if client == nil {
		return invalid("dynamodb client", "nil")
	}
	if table == "" {
		return invalid("table name", "empty")
	}
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(attrPK), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(attrSK), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(attrPK), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(attrSK), KeyType: types.KeyTypeRange},
		},
		BillingMode: types.BillingModePayPerRequest,
	})
	var inUse *types.ResourceInUseException
	if err != nil && !errors.As(err, &inUse) {
		return fmt.Errorf("isr: create table %s: %w", table, err)
	}
	w := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay = 100 * time.Millisecond
		o.MaxDelay = time.Second
	})
	if err := w.Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)}, 2*time.Minute); err != nil {
		return fmt.Errorf("isr: wait for table %s: %w", table, err)
	}
	return enableTTL(ctx, client, table)
}

// enableTTL turns on TTL deletion on the ttl attribute of table, unless it
// is on already.
func enableTTL(ctx context.Context, client CreateTableAPI, table string) error {
	out, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err != nil {
		return fmt.Errorf("isr: describe ttl of %s: %w", table, err)
	}
	if d := out.TimeToLiveDescription; d != nil {
		switch d.TimeToLiveStatus {
		case types.TimeToLiveStatusEnabled, types.TimeToLiveStatusEnabling:
			if name := aws.ToString(d.AttributeName); name != attrTTL {
				return fmt.Errorf("isr: table %s: TTL is on attribute %q, want %q", table, name, attrTTL)
			}
			return nil
		}
	}
	_, err = client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(attrTTL),
			Enabled:       aws.Bool(true),
		},
	})
	if err != nil && !strings.Contains(strings.ToLower(err.Error()), "already enabled") {
		return fmt.Errorf("isr: enable ttl on %s: %w", table, err)
	}
	return nil
}

func sAttr(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func nAttr(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

func key(pk, sk string) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{attrPK: sAttr(pk), attrSK: sAttr(sk)}
}

// names builds ExpressionAttributeNames "#x" -> x for every attribute used.
func names(attrs ...string) map[string]string {
	m := make(map[string]string, len(attrs))
	for _, a := range attrs {
		m["#"+a] = a
	}
	return m
}

func (t *DynamoTable) get(ctx context.Context, pk, sk string) (map[string]types.AttributeValue, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	out, err := t.client.GetItem(ctx, &dynamodb.GetItemInput{
		TableName:      aws.String(t.table),
		Key:            key(pk, sk),
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		return nil, fmt.Errorf("isr: get %s/%s: %w", pk, sk, err)
	}
	if len(out.Item) == 0 {
		return nil, ErrNotFound
	}
	return out.Item, nil
}

// GetMeta implements Table.
func (t *DynamoTable) GetMeta(ctx context.Context, pk string) (Meta, error) {
	return getMeta(ctx, t.get, pk)
}

// GetLease implements Table.
func (t *DynamoTable) GetLease(ctx context.Context, pk string) (Lease, error) {
	return getLease(ctx, t.get, pk)
}

// GetRequest implements Table.
func (t *DynamoTable) GetRequest(ctx context.Context, pk, k string) (Request, error) {
	return getRequest(ctx, t.get, pk, k)
}

// GetVersion implements Table.
func (t *DynamoTable) GetVersion(ctx context.Context, pk, id string) (Version, error) {
	return getVersion(ctx, t.get, pk, id)
}

// Conditions compare the stored numbers exactly, as DynamoDB does, with the
// caller's Now as exact decimal text (timeN) and with the exact text a
// worker read (Meta.GeneratedAtN), the same comparisons Lease.Held and
// Meta.Fresh make: a fraction another service wrote is never floored.
const condLockFree = "attribute_not_exists(#pk) OR #lease_expires_at <= :now"

// nText is a number attribute holding the exact text s.
func nText(s string) types.AttributeValue { return &types.AttributeValueMemberN{Value: s} }

// AcquireLease implements Table.
func (t *DynamoTable) AcquireLease(ctx context.Context, in AcquireInput) (Lease, error) {
	if err := t.check(); err != nil {
		return Lease{}, err
	}
	if err := validateAcquire(in); err != nil {
		return Lease{}, err
	}
	lease := newLease(in)
	put := types.Put{
		TableName:                           aws.String(t.table),
		Item:                                leaseItem(in.PK, in.Token, in.ExpiresAt, in.TTL),
		ConditionExpression:                 aws.String(condLockFree),
		ExpressionAttributeNames:            names(attrPK, attrLeaseExp),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":now": nText(timeN(in.Now))},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
	if in.IfMetaNotNewer == nil {
		_, err := t.client.PutItem(ctx, &dynamodb.PutItemInput{
			TableName:                           put.TableName,
			Item:                                put.Item,
			ConditionExpression:                 put.ConditionExpression,
			ExpressionAttributeNames:            put.ExpressionAttributeNames,
			ExpressionAttributeValues:           put.ExpressionAttributeValues,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			return lease, nil
		}
		var ccf *types.ConditionalCheckFailedException
		if errors.As(err, &ccf) {
			// A PutItem has no idempotency token: if the first attempt's
			// reply was lost, its retry finds the LOCK that attempt wrote.
			// The token is ours (random), so the lease is ours.
			if cur, derr := decodeLease(in.PK, ccf.Item); derr == nil && cur.Token == in.Token {
				return cur, nil
			}
			return Lease{}, leaseHeld(in.PK, ccf.Item)
		}
		return Lease{}, writeErr("acquire", in.PK, err)
	}
	check := types.ConditionCheck{
		TableName: aws.String(t.table),
		Key:       key(in.PK, SKMeta),
		// A META without generated_at (pointer only, recipe B) is not
		// compared: its generation lives in the VER# row, beyond a
		// condition; the publish's optimistic version guards it.
		ConditionExpression:                 aws.String("attribute_not_exists(#pk) OR attribute_not_exists(#generated_at) OR #generated_at <= :seen"),
		ExpressionAttributeNames:            names(attrPK, attrGeneratedAt),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":seen": nText(seenN(in))},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureNone,
	}
	_, err := t.client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
		TransactItems: []types.TransactWriteItem{{Put: &put}, {ConditionCheck: &check}},
	})
	if err == nil {
		return lease, nil
	}
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) && len(tce.CancellationReasons) > 0 && aws.ToString(tce.CancellationReasons[0].Code) == reasonCondition {
		if cur, derr := decodeLease(in.PK, tce.CancellationReasons[0].Item); derr == nil && cur.Token == in.Token {
			return cur, nil // our own earlier attempt, as above
		}
	}
	return Lease{}, t.txErr("acquire", in.PK, err, func(i int, item map[string]types.AttributeValue) error {
		if i == 0 {
			return leaseHeld(in.PK, item)
		}
		return ErrMetaChanged
	})
}

func leaseHeld(pk string, old map[string]types.AttributeValue) error {
	l, err := decodeLease(pk, old)
	if err != nil && len(old) > 0 {
		// A LOCK the condition refused but that cannot be read (say a
		// lease_expires_at of another type) is corrupt, never "held
		// until 0".
		return err
	}
	return &LeaseHeldError{PK: pk, ExpiresAt: l.ExpiresAt}
}

// RefreshLease implements Table.
func (t *DynamoTable) RefreshLease(ctx context.Context, in RefreshInput) (Lease, error) {
	if err := t.check(); err != nil {
		return Lease{}, err
	}
	if err := validateRefresh(in); err != nil {
		return Lease{}, err
	}
	out, err := t.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(t.table),
		Key:                      key(in.Lease.PK, SKLock),
		UpdateExpression:         aws.String("SET #lease_expires_at = :exp, #ttl = :ttl"),
		ConditionExpression:      aws.String("#lease_token = :tok AND #lease_expires_at > :now"),
		ExpressionAttributeNames: names(attrLeaseExp, attrTTL, attrLeaseToken),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":exp": nAttr(in.ExpiresAt), ":ttl": nAttr(in.TTL),
			":tok": sAttr(in.Lease.Token), ":now": nText(timeN(in.Now)),
		},
		ReturnValues: types.ReturnValueAllNew,
	})
	if err != nil {
		return Lease{}, condErr("refresh", in.Lease.PK, err, leaseLost)
	}
	return decodeLease(in.Lease.PK, out.Attributes)
}

// ReleaseLease implements Table.
func (t *DynamoTable) ReleaseLease(ctx context.Context, lease Lease) error {
	if err := t.check(); err != nil {
		return err
	}
	if err := validateLease(lease); err != nil {
		return err
	}
	_, err := t.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(t.table),
		Key:                       key(lease.PK, SKLock),
		ConditionExpression:       aws.String("#lease_token = :tok"),
		ExpressionAttributeNames:  names(attrLeaseToken),
		ExpressionAttributeValues: map[string]types.AttributeValue{":tok": sAttr(lease.Token)},
	})
	return condErr("release", lease.PK, err, leaseLost)
}

// lockDelete is the LOCK item of both publish transactions: the recipes'
// "ConditionCheck lease token and expiry" and "Delete LOCK (conditioned on
// the token)" are one conditional Delete, because a DynamoDB transaction may
// not hold two actions on the same item.
func (t *DynamoTable) lockDelete(l Lease, now time.Time) types.TransactWriteItem {
	return types.TransactWriteItem{Delete: &types.Delete{
		TableName:                 aws.String(t.table),
		Key:                       key(l.PK, SKLock),
		ConditionExpression:       aws.String("#lease_token = :tok AND #lease_expires_at > :now"),
		ExpressionAttributeNames:  names(attrLeaseToken, attrLeaseExp),
		ExpressionAttributeValues: map[string]types.AttributeValue{":tok": sAttr(l.Token), ":now": nText(timeN(now))},
	}}
}

// condRequestStarted is the condition on a REQ# item that is completed,
// failed or abandoned (requestStarted), with the values of requestValues.
const condRequestStarted = "#status = :started AND #request_hash = :h"

// requestValues are condRequestStarted's values for hash, with set (the
// update's own values) added.
func requestValues(hash string, set map[string]types.AttributeValue) map[string]types.AttributeValue {
	set[":started"], set[":h"] = sAttr(string(RequestStarted)), sAttr(hash)
	return set
}

func (t *DynamoTable) requestComplete(pk string, rc *RequestCompletion, s3Key string) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                aws.String(t.table),
		Key:                      key(pk, RequestSKPrefix+rc.Key),
		UpdateExpression:         aws.String("SET #status = :completed, #result_s3_key = :res"),
		ConditionExpression:      aws.String(condRequestStarted),
		ExpressionAttributeNames: names(attrStatus, attrResultS3Key, attrRequestHash),
		ExpressionAttributeValues: requestValues(rc.Hash, map[string]types.AttributeValue{
			":completed": sAttr(string(RequestCompleted)), ":res": sAttr(s3Key),
		}),
	}}
}

// Publish implements Table (recipe A). Transaction items, in order: LOCK
// (conditional delete), META (put), REQ# (update, optional).
func (t *DynamoTable) Publish(ctx context.Context, in PublishInput) error {
	if err := t.check(); err != nil {
		return err
	}
	if err := validatePublish(in); err != nil {
		return err
	}
	pk := in.Lease.PK
	put := &types.Put{TableName: aws.String(t.table), Item: metaItem(pk, in.Meta)}
	if in.Monotonic {
		put.ConditionExpression = aws.String("attribute_not_exists(#generated_at) OR #generated_at < :gen")
		put.ExpressionAttributeNames = names(attrGeneratedAt)
		put.ExpressionAttributeValues = map[string]types.AttributeValue{":gen": nAttr(in.Meta.GeneratedAt)}
	}
	items := []types.TransactWriteItem{t.lockDelete(in.Lease, in.Now), {Put: put}}
	if in.Request != nil {
		items = append(items, t.requestComplete(pk, in.Request, in.Meta.S3Key))
	}
	_, err := t.client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if err == nil {
		return nil
	}
	return t.txErr("publish", pk, err, func(i int, _ map[string]types.AttributeValue) error {
		return publishRefusal(i)
	})
}

// PublishPointer implements Table (recipe B). Transaction items, in order:
// LOCK (conditional delete), VER# (put if absent), META (update with
// optimistic version), REQ# (update, optional).
func (t *DynamoTable) PublishPointer(ctx context.Context, in PublishPointerInput) (Meta, error) {
	if err := t.check(); err != nil {
		return Meta{}, err
	}
	if err := validatePointer(in); err != nil {
		return Meta{}, err
	}
	pk := in.Lease.PK
	v := in.Version
	m := pointerMeta(pk, in)
	set, remove := pointerMetaUpdate(m)
	var setExpr, removeExpr []string
	vals := map[string]types.AttributeValue{}
	for _, a := range pointerMetaAttrs {
		if val, ok := set[a]; ok {
			setExpr = append(setExpr, "#"+a+" = :"+a)
			vals[":"+a] = val
		}
	}
	for _, a := range remove {
		removeExpr = append(removeExpr, "#"+a)
	}
	expr := "SET " + strings.Join(setExpr, ", ")
	if len(removeExpr) > 0 {
		expr += " REMOVE " + strings.Join(removeExpr, ", ")
	}
	// Version 0 is META without a version attribute (as decoded), or with
	// an explicit 0 written by another service.
	cond := "#version = :ev"
	if in.ExpectedVersion == 0 {
		cond = "attribute_not_exists(#version) OR #version = :ev"
	}
	vals[":ev"] = nAttr(in.ExpectedVersion)
	if in.Previous != "" {
		cond = "(" + cond + ") AND #current_sk = :prev"
		vals[":prev"] = sAttr(in.Previous)
	}
	if in.Monotonic {
		cond = "(" + cond + ") AND (attribute_not_exists(#generated_at) OR #generated_at < :generated_at)"
	}
	items := []types.TransactWriteItem{
		t.lockDelete(in.Lease, in.Now),
		{Put: &types.Put{
			TableName:                aws.String(t.table),
			Item:                     versionItem(pk, v),
			ConditionExpression:      aws.String("attribute_not_exists(#pk)"),
			ExpressionAttributeNames: names(attrPK),
		}},
		{Update: &types.Update{
			TableName:                           aws.String(t.table),
			Key:                                 key(pk, SKMeta),
			UpdateExpression:                    aws.String(expr),
			ConditionExpression:                 aws.String(cond),
			ExpressionAttributeNames:            names(pointerMetaAttrs...),
			ExpressionAttributeValues:           vals,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}},
	}
	if in.Request != nil {
		items = append(items, t.requestComplete(pk, in.Request, v.S3Key))
	}
	retire := in.Previous != "" && in.Previous != m.CurrentSK
	if retire {
		items = append(items, t.retireVersion(pk, in.Previous, in.PreviousTTL))
	}
	_, err := t.client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if err == nil {
		return m, nil
	}
	if retire {
		var tce *types.TransactionCanceledException
		if errors.As(err, &tce) && len(tce.CancellationReasons) == len(items) {
			// The retire item is no part of the recipe's answer: drop its
			// reason. Refused alone, the row it names is gone already
			// (removed by its ttl, or by another service): publish
			// without it.
			last := aws.ToString(tce.CancellationReasons[len(items)-1].Code)
			rest := tce.CancellationReasons[:len(items)-1]
			if last == reasonCondition && allNone(rest) {
				_, err = t.client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items[:len(items)-1]})
				if err == nil {
					return m, nil
				}
			} else {
				trimmed := *tce
				trimmed.CancellationReasons = rest
				err = &trimmed
			}
		}
	}
	return Meta{}, t.txErr("publish-pointer", pk, err, func(i int, old map[string]types.AttributeValue) error {
		notNewer := false
		if i == 2 && in.Monotonic {
			// With the expected version (and pointer), only generated_at
			// can refuse.
			cur, derr := decodeMetaLoose(pk, old)
			sk, _ := getS(pk, SKMeta, old, attrCurrentSK, false)
			notNewer = derr == nil && cur.Version == in.ExpectedVersion && (in.Previous == "" || sk == in.Previous)
		}
		return pointerRefusal(i, notNewer)
	})
}

// retireVersion is the update of a recipe-B publish that gives the VER#
// row META pointed to, now superseded, its ttl; conditioned on the row
// existing, so it never creates one.
func (t *DynamoTable) retireVersion(pk, sk string, ttl int64) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String(t.table),
		Key:                       key(pk, sk),
		UpdateExpression:          aws.String("SET #ttl = :ttl"),
		ConditionExpression:       aws.String("attribute_exists(#pk)"),
		ExpressionAttributeNames:  names(attrTTL, attrPK),
		ExpressionAttributeValues: map[string]types.AttributeValue{":ttl": nAttr(ttl)},
	}}
}

// allNone reports whether no transaction item was refused.
func allNone(reasons []types.CancellationReason) bool {
	for _, r := range reasons {
		if c := aws.ToString(r.Code); c != "" && c != reasonNone {
			return false
		}
	}
	return true
}

// BeginRequest implements Table.
func (t *DynamoTable) BeginRequest(ctx context.Context, in BeginRequestInput) (Request, bool, error) {
	if err := t.check(); err != nil {
		return Request{}, false, err
	}
	if err := validateBegin(in); err != nil {
		return Request{}, false, err
	}
	cond := "attribute_not_exists(#pk) OR #ttl <= :now"
	vals := map[string]types.AttributeValue{":now": nText(timeN(in.Now))}
	attrNames := names(attrPK, attrTTL)
	if in.RetryFailed {
		cond += " OR (#status = :failed AND #request_hash = :h)"
		vals[":failed"] = sAttr(string(RequestFailed))
		vals[":h"] = sAttr(in.Hash)
		attrNames = names(attrPK, attrTTL, attrStatus, attrRequestHash)
	}
	_, err := t.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           aws.String(t.table),
		Item:                                requestItem(in),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            attrNames,
		ExpressionAttributeValues:           vals,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return newRequest(in), true, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return Request{}, false, writeErr("begin-request", in.PK, err)
	}
	return existingRequest(in, ccf.Item)
}

// FailRequest implements Table.
func (t *DynamoTable) FailRequest(ctx context.Context, pk, k, hash string) error {
	if err := t.check(); err != nil {
		return err
	}
	if err := validateRequestRef(pk, k, hash); err != nil {
		return err
	}
	_, err := t.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(t.table),
		Key:                      key(pk, RequestSKPrefix+k),
		UpdateExpression:         aws.String("SET #status = :failed"),
		ConditionExpression:      aws.String(condRequestStarted),
		ExpressionAttributeNames: names(attrStatus, attrRequestHash),
		ExpressionAttributeValues: requestValues(hash, map[string]types.AttributeValue{
			":failed": sAttr(string(RequestFailed)),
		}),
	})
	return condErr("fail-request", pk, err, requestState)
}

// AbandonRequest implements Table.
func (t *DynamoTable) AbandonRequest(ctx context.Context, pk, k, hash string) error {
	if err := t.check(); err != nil {
		return err
	}
	if err := validateRequestRef(pk, k, hash); err != nil {
		return err
	}
	_, err := t.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(t.table),
		Key:                       key(pk, RequestSKPrefix+k),
		ConditionExpression:       aws.String(condRequestStarted),
		ExpressionAttributeNames:  names(attrStatus, attrRequestHash),
		ExpressionAttributeValues: requestValues(hash, map[string]types.AttributeValue{}),
	})
	return condErr("abandon-request", pk, err, requestState)
}

// condErr maps the outcome of a conditional write of op: nil on success,
// refusal(op, pk) when the condition failed, else as writeErr.
func condErr(op, pk string, err error, refusal func(op, pk string) error) error {
	if err == nil {
		return nil
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return refusal(op, pk)
	}
	return writeErr(op, pk, err)
}

// writeErr wraps a store failure, mapping a conflict with a concurrent
// transaction to ErrConflict.
func writeErr(op, pk string, err error) error {
	var tc *types.TransactionConflictException
	if errors.As(err, &tc) {
		return &TxError{Op: op, PK: pk, Reasons: []string{reasonConflict}, Errors: []error{ErrConflict}}
	}
	return fmt.Errorf("isr: %s on %s: %w", op, pk, err)
}

// txErr maps a TransactWriteItems failure to a *TxError: each
// ConditionalCheckFailed reason through failed(index, old item), each
// TransactionConflict to ErrConflict. Other failures are wrapped as is.
func (t *DynamoTable) txErr(op, pk string, err error, failed func(int, map[string]types.AttributeValue) error) error {
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		return writeErr(op, pk, err)
	}
	te := &TxError{Op: op, PK: pk}
	other := false
	for i, r := range tce.CancellationReasons {
		code := aws.ToString(r.Code)
		if code == "" {
			code = reasonNone
		}
		te.Reasons = append(te.Reasons, code)
		switch code {
		case reasonNone:
		case reasonCondition:
			te.Errors = append(te.Errors, failed(i, r.Item))
		case reasonConflict:
			te.Errors = append(te.Errors, ErrConflict)
		default:
			other = true
		}
	}
	if other || len(te.Errors) == 0 {
		return fmt.Errorf("isr: %s on %s: %w", op, pk, err)
	}
	return te
}

// Decoding. Numbers are accepted as integers or decimals (floored into the
// int64 fields; the exact text goes to the N fields, see decoder.exact);
// any other type is a *CorruptItemError.

func getS(pk, sk string, item map[string]types.AttributeValue, attr string, required bool) (string, error) {
	v, ok := item[attr]
	if !ok {
		if required {
			return "", &CorruptItemError{PK: pk, SK: sk, Attr: attr, Reason: "missing"}
		}
		return "", nil
	}
	s, ok := v.(*types.AttributeValueMemberS)
	if !ok {
		return "", &CorruptItemError{PK: pk, SK: sk, Attr: attr, Reason: fmt.Sprintf("want S, got %T", v)}
	}
	return s.Value, nil
}

func getN(pk, sk string, item map[string]types.AttributeValue, attr string, required bool) (int64, error) {
	v, ok := item[attr]
	if !ok {
		if required {
			return 0, &CorruptItemError{PK: pk, SK: sk, Attr: attr, Reason: "missing"}
		}
		return 0, nil
	}
	n, ok := v.(*types.AttributeValueMemberN)
	if !ok {
		return 0, &CorruptItemError{PK: pk, SK: sk, Attr: attr, Reason: fmt.Sprintf("want N, got %T", v)}
	}
	return parseN(pk, sk, attr, n.Value)
}

func parseN(pk, sk, attr, s string) (int64, error) {
	if !validN(s) {
		return 0, &CorruptItemError{PK: pk, SK: sk, Attr: attr, Reason: "bad number " + strconv.Quote(s)}
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return i, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != f || f > 9e18 || f < -9e18 {
		return 0, &CorruptItemError{PK: pk, SK: sk, Attr: attr, Reason: "bad number " + strconv.Quote(s)}
	}
	i := int64(f)
	if float64(i) > f {
		i--
	}
	return i, nil
}

// ttl reads the ttl attribute, garbage collection only: one of another
// type or unreadable is taken as absent, never an error.
func (d *decoder) ttl() int64 {
	v, err := getN(d.pk, d.sk, d.item, attrTTL, false)
	if err != nil {
		return 0
	}
	return v
}

type decoder struct {
	pk, sk string
	item   map[string]types.AttributeValue
	err    error
}

func (d *decoder) s(attr string, required bool) string {
	if d.err != nil {
		return ""
	}
	v, err := getS(d.pk, d.sk, d.item, attr, required)
	d.err = err
	return v
}

func (d *decoder) n(attr string, required bool) int64 {
	if d.err != nil {
		return 0
	}
	v, err := getN(d.pk, d.sk, d.item, attr, required)
	d.err = err
	return v
}

// exact is the text of number attribute attr when it is not exactly the
// integer v read from it ("" otherwise): the exact value the N fields of
// Meta, Lease and Version carry.
func (d *decoder) exact(attr string, v int64) string {
	if d.err != nil {
		return ""
	}
	n, ok := d.item[attr].(*types.AttributeValueMemberN)
	if !ok || n.Value == strconv.FormatInt(v, 10) {
		return ""
	}
	return n.Value
}

func decodeMeta(pk string, item map[string]types.AttributeValue) (Meta, error) {
	d := decoder{pk: pk, sk: SKMeta, item: item}
	// Under recipe B (current_sk present) revalidate_seconds may be absent
	// from META and from the VER# row (merged in by getMeta): a writer that
	// sets only the pointer and the version. The Coordinator then applies
	// its default (WithDefaultRevalidate); a recipe-A META must carry it.
	_, hasPointer := item[attrCurrentSK]
	_, hasRevalidate := item[attrRevalidate]
	m := Meta{
		PK:                pk,
		S3Key:             d.s(attrS3Key, true),
		GeneratedAt:       d.n(attrGeneratedAt, true),
		RevalidateSeconds: d.n(attrRevalidate, !hasPointer),
		ETag:              d.s(attrETag, false),
		TTL:               d.ttl(),
		CurrentSK:         d.s(attrCurrentSK, false),
		Version:           d.n(attrVersion, false),
		RevalidateMissing: !hasRevalidate,
	}
	m.GeneratedAtN = d.exact(attrGeneratedAt, m.GeneratedAt)
	m.RevalidateSecondsN = d.exact(attrRevalidate, m.RevalidateSeconds)
	return m, d.err
}

// decodeMetaLoose reads whatever META attributes are present (for mapping a
// cancellation reason), without requiring any.
func decodeMetaLoose(pk string, item map[string]types.AttributeValue) (Meta, error) {
	d := decoder{pk: pk, sk: SKMeta, item: item}
	m := Meta{PK: pk, GeneratedAt: d.n(attrGeneratedAt, false), Version: d.n(attrVersion, false)}
	m.GeneratedAtN = d.exact(attrGeneratedAt, m.GeneratedAt)
	return m, d.err
}

func decodeLease(pk string, item map[string]types.AttributeValue) (Lease, error) {
	d := decoder{pk: pk, sk: SKLock, item: item}
	l := Lease{
		PK:        pk,
		Token:     d.s(attrLeaseToken, true),
		ExpiresAt: d.n(attrLeaseExp, true),
		TTL:       d.ttl(),
	}
	l.ExpiresAtN = d.exact(attrLeaseExp, l.ExpiresAt)
	return l, d.err
}

func decodeRequest(pk, k string, item map[string]types.AttributeValue) (Request, error) {
	d := decoder{pk: pk, sk: RequestSKPrefix + k, item: item}
	r := Request{
		PK:          pk,
		Key:         k,
		Hash:        d.s(attrRequestHash, true),
		Status:      RequestStatus(d.s(attrStatus, true)),
		ResultS3Key: d.s(attrResultS3Key, false),
		TTL:         d.ttl(),
	}
	if d.err == nil {
		switch r.Status {
		case RequestStarted, RequestCompleted, RequestFailed:
		default:
			return Request{}, &CorruptItemError{PK: pk, SK: d.sk, Attr: attrStatus, Reason: "unknown status " + strconv.Quote(string(r.Status))}
		}
	}
	return r, d.err
}

func decodeVersion(pk, id string, item map[string]types.AttributeValue) (Version, error) {
	d := decoder{pk: pk, sk: VersionSKPrefix + id, item: item}
	v := Version{
		PK:          pk,
		ID:          id,
		S3Key:       d.s(attrS3Key, true),
		GeneratedAt: d.n(attrGeneratedAt, true),
		ETag:        d.s(attrETag, false),
		TTL:         d.ttl(),
	}
	v.GeneratedAtN = d.exact(attrGeneratedAt, v.GeneratedAt)
	return v, d.err
}
