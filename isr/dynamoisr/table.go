package dynamoisr

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

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/storekit"
)

// Client is the subset of *dynamodb.Client that Table uses, so
// tests can wrap it.
type Client interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
}

// CreateTableClient is the subset of *dynamodb.Client that CreateTable uses.
type CreateTableClient interface {
	CreateTable(ctx context.Context, in *dynamodb.CreateTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.CreateTableOutput, error)
	DescribeTable(ctx context.Context, in *dynamodb.DescribeTableInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTableOutput, error)
	DescribeTimeToLive(ctx context.Context, in *dynamodb.DescribeTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DescribeTimeToLiveOutput, error)
	UpdateTimeToLive(ctx context.Context, in *dynamodb.UpdateTimeToLiveInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateTimeToLiveOutput, error)
}

// Table is an isr.Table on a DynamoDB table with the ISR schema. Reads are
// strongly consistent; every write is one conditional request or one
// TransactWriteItems. It does no I/O until used.
type Table struct {
	client Client
	table  string
}

var _ isr.Table = (*Table)(nil)

// NewTable returns a Table on table. It does no I/O. An empty
// table name means FACETHEORY_CACHE_TABLE_NAME. A nil client and a missing
// table name are reported, joined, each an *storekit.OptionError matching
// idem.ErrInvalidOption.
func NewTable(client Client, table string) (*Table, error) {
	errs := storekit.Options{Store: "dynamoisr"}
	if client == nil {
		errs.Invalid("NewTable", "DynamoDB client is nil")
	}
	if table == "" {
		name, err := isr.TableNameFromEnv()
		if err != nil {
			errs.Invalid("NewTable", "table name is empty and %s is not set", isr.EnvTableName)
		}
		table = name
	}
	if err := errs.Err(); err != nil {
		return nil, err
	}
	return &Table{client: client, table: table}, nil
}

// check refuses a Table that NewTable did not make.
func (t *Table) check() error {
	if t == nil || t.client == nil || t.table == "" {
		return &storekit.OptionError{Option: "dynamoisr.Table", Reason: "nil or zero Table: use NewTable"}
	}
	return nil
}

// Name returns the table name ("" for a nil Table).
func (t *Table) Name() string {
	if t == nil {
		return ""
	}
	return t.table
}

// CreateTable creates a table with the ISR shape (pk S hash key, sk S range
// key, on-demand billing), waits until it is active, and turns on
// DynamoDB's TTL deletion on the ttl attribute, so expired LOCK, REQ# and
// superseded VER# items are removed by the server (see Lifecycle in
// docs/isr.md); correctness never depends on it. It is idempotent:
// an existing table is waited for, not an error, and its TTL turned on
// unless it already is (on another attribute: an error, since isr's items
// would then never be removed).
func CreateTable(ctx context.Context, client CreateTableClient, table string) error {
	if client == nil {
		return &isr.InvalidInputError{What: "dynamodb client", Reason: "nil"}
	}
	if table == "" {
		return &isr.InvalidInputError{What: "table name", Reason: "empty"}
	}
	_, err := client.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: aws.String(table),
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(isr.AttrPK), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String(isr.AttrSK), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(isr.AttrPK), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String(isr.AttrSK), KeyType: types.KeyTypeRange},
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
func enableTTL(ctx context.Context, client CreateTableClient, table string) error {
	out, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err != nil {
		return fmt.Errorf("isr: describe ttl of %s: %w", table, err)
	}
	if d := out.TimeToLiveDescription; d != nil {
		switch d.TimeToLiveStatus {
		case types.TimeToLiveStatusEnabled, types.TimeToLiveStatusEnabling:
			if name := aws.ToString(d.AttributeName); name != isr.AttrTTL {
				return fmt.Errorf("isr: table %s: TTL is on attribute %q, want %q", table, name, isr.AttrTTL)
			}
			return nil
		}
	}
	_, err = client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(isr.AttrTTL),
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
	return map[string]types.AttributeValue{isr.AttrPK: sAttr(pk), isr.AttrSK: sAttr(sk)}
}

// attrs is the DynamoDB item of it (S and N attributes, as isr writes
// them).
func attrs(it isr.Item) map[string]types.AttributeValue {
	item := make(map[string]types.AttributeValue, len(it))
	for k, v := range it {
		switch v.Type {
		case isr.TypeS:
			item[k] = &types.AttributeValueMemberS{Value: v.Value}
		case isr.TypeN:
			item[k] = &types.AttributeValueMemberN{Value: v.Value}
		}
	}
	return item
}

// itemOf is the isr.Item of a DynamoDB item: S and N attributes with their
// text, any other type by its descriptor alone (which isr decodes as a
// corrupt item).
func itemOf(item map[string]types.AttributeValue) isr.Item {
	if item == nil {
		return nil
	}
	it := make(isr.Item, len(item))
	for k, v := range item {
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			it[k] = isr.Attr{Type: isr.TypeS, Value: v.Value}
		case *types.AttributeValueMemberN:
			it[k] = isr.Attr{Type: isr.TypeN, Value: v.Value}
		case *types.AttributeValueMemberB:
			it[k] = isr.Attr{Type: "B"}
		case *types.AttributeValueMemberBOOL:
			it[k] = isr.Attr{Type: "BOOL"}
		case *types.AttributeValueMemberBS:
			it[k] = isr.Attr{Type: "BS"}
		case *types.AttributeValueMemberL:
			it[k] = isr.Attr{Type: "L"}
		case *types.AttributeValueMemberM:
			it[k] = isr.Attr{Type: "M"}
		case *types.AttributeValueMemberNS:
			it[k] = isr.Attr{Type: "NS"}
		case *types.AttributeValueMemberNULL:
			it[k] = isr.Attr{Type: "NULL"}
		case *types.AttributeValueMemberSS:
			it[k] = isr.Attr{Type: "SS"}
		default:
			it[k] = isr.Attr{}
		}
	}
	return it
}

// names builds ExpressionAttributeNames "#x" -> x for every attribute used.
func names(attrs ...string) map[string]string {
	m := make(map[string]string, len(attrs))
	for _, a := range attrs {
		m["#"+a] = a
	}
	return m
}

func (t *Table) get(ctx context.Context, pk, sk string) (isr.Item, error) {
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
		return nil, isr.ErrNotFound
	}
	return itemOf(out.Item), nil
}

// GetMeta implements isr.Table.
func (t *Table) GetMeta(ctx context.Context, pk string) (isr.Meta, error) {
	return isr.ItemGetter(t.get).GetMeta(ctx, pk)
}

// GetLease implements isr.Table.
func (t *Table) GetLease(ctx context.Context, pk string) (isr.Lease, error) {
	return isr.ItemGetter(t.get).GetLease(ctx, pk)
}

// GetRequest implements isr.Table.
func (t *Table) GetRequest(ctx context.Context, pk, k string) (isr.Request, error) {
	return isr.ItemGetter(t.get).GetRequest(ctx, pk, k)
}

// GetVersion implements isr.Table.
func (t *Table) GetVersion(ctx context.Context, pk, id string) (isr.Version, error) {
	return isr.ItemGetter(t.get).GetVersion(ctx, pk, id)
}

// Conditions compare the stored numbers exactly, as DynamoDB does, with the
// caller's Now as exact decimal text (isr.TimeText) and with the exact text a
// worker read (isr.Meta.GeneratedAtN), the same comparisons isr.Lease.Held and
// isr.Meta.Fresh make: a fraction another service wrote is never floored.
const condLockFree = "attribute_not_exists(#pk) OR #lease_expires_at <= :now"

// nText is a number attribute holding the exact text s.
func nText(s string) types.AttributeValue { return &types.AttributeValueMemberN{Value: s} }

// AcquireLease implements isr.Table.
func (t *Table) AcquireLease(ctx context.Context, in isr.AcquireInput) (isr.Lease, error) {
	if err := t.check(); err != nil {
		return isr.Lease{}, err
	}
	if err := isr.ValidateAcquire(in); err != nil {
		return isr.Lease{}, err
	}
	lease := isr.AcquiredLease(in)
	put := types.Put{
		TableName:                           aws.String(t.table),
		Item:                                attrs(isr.LeaseItem(in.PK, in.Token, in.ExpiresAt, in.TTL)),
		ConditionExpression:                 aws.String(condLockFree),
		ExpressionAttributeNames:            names(isr.AttrPK, isr.AttrLeaseExpiresAt),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":now": nText(isr.TimeText(in.Now))},
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
			if cur, derr := isr.DecodeLease(in.PK, itemOf(ccf.Item)); derr == nil && cur.Token == in.Token {
				return cur, nil
			}
			return isr.Lease{}, isr.LeaseHeld(in.PK, itemOf(ccf.Item))
		}
		return isr.Lease{}, writeErr("acquire", in.PK, err)
	}
	check := types.ConditionCheck{
		TableName: aws.String(t.table),
		Key:       key(in.PK, isr.SKMeta),
		// A META without generated_at (pointer only, recipe B) is not
		// compared: its generation lives in the VER# row, beyond a
		// condition; the publish's optimistic version guards it.
		ConditionExpression:                 aws.String("attribute_not_exists(#pk) OR attribute_not_exists(#generated_at) OR #generated_at <= :seen"),
		ExpressionAttributeNames:            names(isr.AttrPK, isr.AttrGeneratedAt),
		ExpressionAttributeValues:           map[string]types.AttributeValue{":seen": nText(isr.MetaNotNewerText(in))},
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureNone,
	}
	_, err := t.client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
		TransactItems: []types.TransactWriteItem{{Put: &put}, {ConditionCheck: &check}},
	})
	if err == nil {
		return lease, nil
	}
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) && len(tce.CancellationReasons) > 0 && aws.ToString(tce.CancellationReasons[0].Code) == isr.ReasonConditionalCheckFailed {
		if cur, derr := isr.DecodeLease(in.PK, itemOf(tce.CancellationReasons[0].Item)); derr == nil && cur.Token == in.Token {
			return cur, nil // our own earlier attempt, as above
		}
	}
	return isr.Lease{}, t.txErr("acquire", in.PK, err, func(i int, item isr.Item) error {
		if i == 0 {
			return isr.LeaseHeld(in.PK, item)
		}
		return isr.ErrMetaChanged
	})
}

// RefreshLease implements isr.Table.
func (t *Table) RefreshLease(ctx context.Context, in isr.RefreshInput) (isr.Lease, error) {
	if err := t.check(); err != nil {
		return isr.Lease{}, err
	}
	if err := isr.ValidateRefresh(in); err != nil {
		return isr.Lease{}, err
	}
	out, err := t.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(t.table),
		Key:                      key(in.Lease.PK, isr.SKLock),
		UpdateExpression:         aws.String("SET #lease_expires_at = :exp, #ttl = :ttl"),
		ConditionExpression:      aws.String("#lease_token = :tok AND #lease_expires_at > :now"),
		ExpressionAttributeNames: names(isr.AttrLeaseExpiresAt, isr.AttrTTL, isr.AttrLeaseToken),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":exp": nAttr(in.ExpiresAt), ":ttl": nAttr(in.TTL),
			":tok": sAttr(in.Lease.Token), ":now": nText(isr.TimeText(in.Now)),
		},
		ReturnValues: types.ReturnValueAllNew,
	})
	if err != nil {
		return isr.Lease{}, condErr("refresh", in.Lease.PK, err, isr.LeaseLost)
	}
	return isr.DecodeLease(in.Lease.PK, itemOf(out.Attributes))
}

// ReleaseLease implements isr.Table.
func (t *Table) ReleaseLease(ctx context.Context, lease isr.Lease) error {
	if err := t.check(); err != nil {
		return err
	}
	if err := isr.ValidateLease(lease); err != nil {
		return err
	}
	_, err := t.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(t.table),
		Key:                       key(lease.PK, isr.SKLock),
		ConditionExpression:       aws.String("#lease_token = :tok"),
		ExpressionAttributeNames:  names(isr.AttrLeaseToken),
		ExpressionAttributeValues: map[string]types.AttributeValue{":tok": sAttr(lease.Token)},
	})
	return condErr("release", lease.PK, err, isr.LeaseLost)
}

// lockDelete is the LOCK item of both publish transactions: the recipes'
// "ConditionCheck lease token and expiry" and "Delete LOCK (conditioned on
// the token)" are one conditional Delete, because a DynamoDB transaction may
// not hold two actions on the same item.
func (t *Table) lockDelete(l isr.Lease, now time.Time) types.TransactWriteItem {
	return types.TransactWriteItem{Delete: &types.Delete{
		TableName:                 aws.String(t.table),
		Key:                       key(l.PK, isr.SKLock),
		ConditionExpression:       aws.String("#lease_token = :tok AND #lease_expires_at > :now"),
		ExpressionAttributeNames:  names(isr.AttrLeaseToken, isr.AttrLeaseExpiresAt),
		ExpressionAttributeValues: map[string]types.AttributeValue{":tok": sAttr(l.Token), ":now": nText(isr.TimeText(now))},
	}}
}

// condRequestStarted is the condition on a REQ# item that is completed,
// failed or abandoned (requestStarted), with the values of requestValues.
const condRequestStarted = "#status = :started AND #request_hash = :h"

// requestValues are condRequestStarted's values for hash, with set (the
// update's own values) added.
func requestValues(hash string, set map[string]types.AttributeValue) map[string]types.AttributeValue {
	set[":started"], set[":h"] = sAttr(string(isr.RequestStarted)), sAttr(hash)
	return set
}

func (t *Table) requestComplete(pk string, rc *isr.RequestCompletion, s3Key string) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                aws.String(t.table),
		Key:                      key(pk, isr.RequestSKPrefix+rc.Key),
		UpdateExpression:         aws.String("SET #status = :completed, #result_s3_key = :res"),
		ConditionExpression:      aws.String(condRequestStarted),
		ExpressionAttributeNames: names(isr.AttrStatus, isr.AttrResultS3Key, isr.AttrRequestHash),
		ExpressionAttributeValues: requestValues(rc.Hash, map[string]types.AttributeValue{
			":completed": sAttr(string(isr.RequestCompleted)), ":res": sAttr(s3Key),
		}),
	}}
}

// Publish implements isr.Table (recipe A). Transaction items, in order: LOCK
// (conditional delete), META (put), REQ# (update, optional).
func (t *Table) Publish(ctx context.Context, in isr.PublishInput) error {
	if err := t.check(); err != nil {
		return err
	}
	if err := isr.ValidatePublish(in); err != nil {
		return err
	}
	pk := in.Lease.PK
	put := &types.Put{TableName: aws.String(t.table), Item: attrs(isr.MetaItem(pk, in.Meta))}
	if in.Monotonic {
		put.ConditionExpression = aws.String("attribute_not_exists(#generated_at) OR #generated_at < :gen")
		put.ExpressionAttributeNames = names(isr.AttrGeneratedAt)
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
	return t.txErr("publish", pk, err, func(i int, _ isr.Item) error {
		return isr.PublishRefusal(i)
	})
}

// PublishPointer implements isr.Table (recipe B). Transaction items, in order:
// LOCK (conditional delete), VER# (put if absent), META (update with
// optimistic version), REQ# (update, optional), and the superseded VER#
// row's ttl (update, when META pointed to another row).
func (t *Table) PublishPointer(ctx context.Context, in isr.PublishPointerInput) (isr.Meta, error) {
	if err := t.check(); err != nil {
		return isr.Meta{}, err
	}
	if err := isr.ValidatePublishPointer(in); err != nil {
		return isr.Meta{}, err
	}
	pk := in.Lease.PK
	v := in.Version
	m := isr.PointerMeta(in)
	items := []types.TransactWriteItem{
		t.lockDelete(in.Lease, in.Now),
		{Put: &types.Put{
			TableName:                aws.String(t.table),
			Item:                     attrs(isr.VersionItem(pk, v)),
			ConditionExpression:      aws.String("attribute_not_exists(#pk)"),
			ExpressionAttributeNames: names(isr.AttrPK),
		}},
		t.pointerMetaUpdate(in, m),
	}
	if in.Request != nil {
		items = append(items, t.requestComplete(pk, in.Request, v.S3Key))
	}
	retire := in.Previous != "" && in.Previous != m.CurrentSK
	if retire {
		items = append(items, t.retireVersion(pk, in.Previous, in.PreviousTTL))
	}
	err := t.writePointer(ctx, items, retire)
	if err == nil {
		return m, nil
	}
	return isr.Meta{}, t.txErr("publish-pointer", pk, err, func(i int, old isr.Item) error {
		return isr.PointerRefusal(i, i == 2 && isr.PointerNotNewer(in, old))
	})
}

// pointerMetaUpdate is the META update of a recipe-B publish: it sets
// META's pointer attributes to m's and removes those m leaves empty,
// conditioned on META's version being in.ExpectedVersion, on META pointing
// to in.Previous when that is set, and, with in.Monotonic, on META's
// content being older than m's.
func (t *Table) pointerMetaUpdate(in isr.PublishPointerInput, m isr.Meta) types.TransactWriteItem {
	update, remove := isr.PointerMetaUpdate(m)
	set := attrs(update)
	var setExpr, removeExpr []string
	vals := map[string]types.AttributeValue{}
	for _, a := range isr.PointerMetaAttrs() {
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
	// isr.Version 0 is META without a version attribute (as decoded), or with
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
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                           aws.String(t.table),
		Key:                                 key(in.Lease.PK, isr.SKMeta),
		UpdateExpression:                    aws.String(expr),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            names(isr.PointerMetaAttrs()...),
		ExpressionAttributeValues:           vals,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}}
}

// writePointer writes a recipe-B publish's transaction. With retire, its
// last item is the superseded VER# row's ttl, which is no part of the
// recipe's answer: refused alone, the row it names is gone already (removed
// by its ttl, or by another service), and writePointer writes the rest
// without it; refused with others, its reason is dropped from the error, so
// that the reasons line up with the recipe's items.
func (t *Table) writePointer(ctx context.Context, items []types.TransactWriteItem, retire bool) error {
	_, err := t.client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items})
	if err == nil || !retire {
		return err
	}
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) || len(tce.CancellationReasons) != len(items) {
		return err
	}
	last := aws.ToString(tce.CancellationReasons[len(items)-1].Code)
	rest := tce.CancellationReasons[:len(items)-1]
	if last == isr.ReasonConditionalCheckFailed && allNone(rest) {
		_, err = t.client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items[:len(items)-1]})
		return err
	}
	trimmed := *tce
	trimmed.CancellationReasons = rest
	return &trimmed
}

// retireVersion is the update of a recipe-B publish that gives the VER#
// row META pointed to, now superseded, its ttl; conditioned on the row
// existing, so it never creates one.
func (t *Table) retireVersion(pk, sk string, ttl int64) types.TransactWriteItem {
	return types.TransactWriteItem{Update: &types.Update{
		TableName:                 aws.String(t.table),
		Key:                       key(pk, sk),
		UpdateExpression:          aws.String("SET #ttl = :ttl"),
		ConditionExpression:       aws.String("attribute_exists(#pk)"),
		ExpressionAttributeNames:  names(isr.AttrTTL, isr.AttrPK),
		ExpressionAttributeValues: map[string]types.AttributeValue{":ttl": nAttr(ttl)},
	}}
}

// allNone reports whether no transaction item was refused.
func allNone(reasons []types.CancellationReason) bool {
	for _, r := range reasons {
		if c := aws.ToString(r.Code); c != "" && c != isr.ReasonNone {
			return false
		}
	}
	return true
}

// BeginRequest implements isr.Table.
func (t *Table) BeginRequest(ctx context.Context, in isr.BeginRequestInput) (isr.Request, bool, error) {
	if err := t.check(); err != nil {
		return isr.Request{}, false, err
	}
	if err := isr.ValidateBeginRequest(in); err != nil {
		return isr.Request{}, false, err
	}
	cond := "attribute_not_exists(#pk) OR #ttl <= :now"
	vals := map[string]types.AttributeValue{":now": nText(isr.TimeText(in.Now))}
	attrNames := names(isr.AttrPK, isr.AttrTTL)
	if in.RetryFailed {
		cond += " OR (#status = :failed AND #request_hash = :h)"
		vals[":failed"] = sAttr(string(isr.RequestFailed))
		vals[":h"] = sAttr(in.Hash)
		attrNames = names(isr.AttrPK, isr.AttrTTL, isr.AttrStatus, isr.AttrRequestHash)
	}
	_, err := t.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           aws.String(t.table),
		Item:                                attrs(isr.RequestItem(in)),
		ConditionExpression:                 aws.String(cond),
		ExpressionAttributeNames:            attrNames,
		ExpressionAttributeValues:           vals,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	if err == nil {
		return isr.BegunRequest(in), true, nil
	}
	var ccf *types.ConditionalCheckFailedException
	if !errors.As(err, &ccf) {
		return isr.Request{}, false, writeErr("begin-request", in.PK, err)
	}
	return isr.ExistingRequest(in, itemOf(ccf.Item))
}

// FailRequest implements isr.Table.
func (t *Table) FailRequest(ctx context.Context, pk, k, hash string) error {
	if err := t.check(); err != nil {
		return err
	}
	if err := isr.ValidateRequestRef(pk, k, hash); err != nil {
		return err
	}
	_, err := t.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(t.table),
		Key:                      key(pk, isr.RequestSKPrefix+k),
		UpdateExpression:         aws.String("SET #status = :failed"),
		ConditionExpression:      aws.String(condRequestStarted),
		ExpressionAttributeNames: names(isr.AttrStatus, isr.AttrRequestHash),
		ExpressionAttributeValues: requestValues(hash, map[string]types.AttributeValue{
			":failed": sAttr(string(isr.RequestFailed)),
		}),
	})
	return condErr("fail-request", pk, err, isr.RequestNotStarted)
}

// AbandonRequest implements isr.Table.
func (t *Table) AbandonRequest(ctx context.Context, pk, k, hash string) error {
	if err := t.check(); err != nil {
		return err
	}
	if err := isr.ValidateRequestRef(pk, k, hash); err != nil {
		return err
	}
	_, err := t.client.DeleteItem(ctx, &dynamodb.DeleteItemInput{
		TableName:                 aws.String(t.table),
		Key:                       key(pk, isr.RequestSKPrefix+k),
		ConditionExpression:       aws.String(condRequestStarted),
		ExpressionAttributeNames:  names(isr.AttrStatus, isr.AttrRequestHash),
		ExpressionAttributeValues: requestValues(hash, map[string]types.AttributeValue{}),
	})
	return condErr("abandon-request", pk, err, isr.RequestNotStarted)
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
// transaction to isr.ErrConflict.
func writeErr(op, pk string, err error) error {
	var tc *types.TransactionConflictException
	if errors.As(err, &tc) {
		return &isr.TxError{Op: op, PK: pk, Reasons: []string{isr.ReasonTransactionConflict}, Errors: []error{isr.ErrConflict}}
	}
	return fmt.Errorf("isr: %s on %s: %w", op, pk, err)
}

// txErr maps a TransactWriteItems failure to a *TxError: each
// ConditionalCheckFailed reason through failed(index, old item), each
// TransactionConflict to isr.ErrConflict. Other failures are wrapped as is.
func (t *Table) txErr(op, pk string, err error, failed func(int, isr.Item) error) error {
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) {
		return writeErr(op, pk, err)
	}
	te := &isr.TxError{Op: op, PK: pk}
	other := false
	for i, r := range tce.CancellationReasons {
		code := aws.ToString(r.Code)
		if code == "" {
			code = isr.ReasonNone
		}
		te.Reasons = append(te.Reasons, code)
		switch code {
		case isr.ReasonNone:
		case isr.ReasonConditionalCheckFailed:
			te.Errors = append(te.Errors, failed(i, itemOf(r.Item)))
		case isr.ReasonTransactionConflict:
			te.Errors = append(te.Errors, isr.ErrConflict)
		default:
			other = true
		}
	}
	if other || len(te.Errors) == 0 {
		return fmt.Errorf("isr: %s on %s: %w", op, pk, err)
	}
	return te
}
