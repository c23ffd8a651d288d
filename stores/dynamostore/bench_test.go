package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/dynamostore"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-go/idem"
)

// The benchmarks interleave the store, the guard and the raw DynamoDB
// requests they stand against in every iteration, so the ratios come from
// one run on the same backend under the same load. ns/op is the sum of the
// variants; the per-variant figures and ratios are the extra metrics.

// rawRecord is an item shaped like a store record.
func rawRecord(pk, nonce string, now int64) map[string]types.AttributeValue {
	n := func(v int64) types.AttributeValue {
		return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
	}
	s := func(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
	return map[string]types.AttributeValue{
		"pk": s(pk), "sk": s("IDEM"), "record_version": n(1), "status": s("in_progress"),
		"nonce": s(nonce), "payload_hash": s(""), "attempt": n(1), "started_at": n(now),
		"heartbeat_at": n(now), "expires_at": n(now + 60_000), "ttl": n(now/1000 + 3660),
	}
}

func rawPut(ctx context.Context, c *dynamodb.Client, pk, nonce string) error {
	_, err := c.PutItem(ctx, &dynamodb.PutItemInput{
		TableName:                           aws.String(testTable),
		Item:                                rawRecord(pk, nonce, time.Now().UnixMilli()),
		ConditionExpression:                 aws.String("attribute_not_exists(pk)"),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	return err
}

func rawComplete(ctx context.Context, c *dynamodb.Client, pk, nonce string) error {
	now := time.Now().UnixMilli()
	_, err := c.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(testTable),
		Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: "IDEM"},
		},
		UpdateExpression:         aws.String("SET #st = :st, #res = :res, completed_at = :now, expires_at = :exp, #ttl = :ttl"),
		ConditionExpression:      aws.String("nonce = :n"),
		ExpressionAttributeNames: map[string]string{"#st": "status", "#res": "result", "#ttl": "ttl"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":st": &types.AttributeValueMemberS{Value: "completed"}, ":res": &types.AttributeValueMemberB{Value: []byte("42")},
			":now": &types.AttributeValueMemberN{Value: strconv.FormatInt(now, 10)},
			":exp": &types.AttributeValueMemberN{Value: strconv.FormatInt(now+3_600_000, 10)},
			":ttl": &types.AttributeValueMemberN{Value: strconv.FormatInt(now/1000+7200, 10)},
			":n":   &types.AttributeValueMemberS{Value: nonce},
		},
	})
	return err
}

type variant struct {
	name string
	fn   func(i int) error
	d    time.Duration
	reqs int
}

func runVariants(b *testing.B, e *env, vs []*variant, baseline int) {
	b.Helper()
	e.log.Take()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		for _, v := range vs {
			start := time.Now()
			if err := v.fn(i); err != nil {
				b.Fatalf("%s: %v", v.name, err)
			}
			v.d += time.Since(start)
			v.reqs += len(e.log.Take())
		}
	}
	b.StopTimer()
	n := float64(b.N)
	base := float64(vs[baseline].d)
	for i, v := range vs {
		b.ReportMetric(float64(v.d.Nanoseconds())/n, v.name+"-ns/op")
		b.ReportMetric(float64(v.reqs)/n, v.name+"-req/op")
		if i != baseline {
			b.ReportMetric(float64(v.d)/base, v.name+"/"+vs[baseline].name)
		}
	}
}

// BenchmarkFresh: a first call. Raw: conditional PutItem + UpdateItem.
// Store: Claim + Complete. Guard: Do on a new key. Guard-inst: the same
// with WithInstanceID (the claim stores its owner).
func BenchmarkFresh(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	g, err := idem.New[int](e.store)
	if err != nil {
		b.Fatal(err)
	}
	gi, err := idem.New[int](e.store, idem.WithInstanceID("bench-"+randHex(4)))
	if err != nil {
		b.Fatal(err)
	}
	run := randHex(4)
	key := func(kind string, i int) string { return kind + run + "-" + strconv.Itoa(i) }
	runVariants(b, e, []*variant{
		{name: "raw", fn: func(i int) error {
			pk := e.prefix + key("raw", i)
			if err := rawPut(ctx, e.client, pk, "n"); err != nil {
				return err
			}
			return rawComplete(ctx, e.client, pk, "n")
		}},
		{name: "store", fn: func(i int) error {
			k := "idem:" + key("store", i)
			if _, err := e.store.Claim(ctx, storekit.ClaimRequest{Key: k, Nonce: "n", LeaseTTL: time.Minute, TakeoverAfter: 30 * time.Second}); err != nil {
				return err
			}
			return e.store.Complete(ctx, k, "n", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("42"), TTL: time.Hour})
		}},
		{name: "guard", fn: func(i int) error {
			_, err := g.Do(ctx, key("guard", i), func(context.Context) (int, error) { return 42, nil })
			return err
		}},
		{name: "guard-inst", fn: func(i int) error {
			_, err := gi.Do(ctx, key("guard-inst", i), func(context.Context) (int, error) { return 42, nil })
			return err
		}},
	}, 0)
}

// BenchmarkReplay: a repeated call on a completed key. Raw: a conditional
// PutItem that fails (ALL_OLD returns the item). Store: Claim that finds
// the completed record. Guard: Do that replays the stored result.
func BenchmarkReplay(b *testing.B) {
	e := newEnv(b)
	ctx := context.Background()
	g, err := idem.New[int](e.store)
	if err != nil {
		b.Fatal(err)
	}
	rawPK, storeKey := e.prefix+"raw-replay", "idem:store-replay"
	if err := rawPut(ctx, e.client, rawPK, "n"); err != nil {
		b.Fatal(err)
	}
	if err := rawComplete(ctx, e.client, rawPK, "n"); err != nil {
		b.Fatal(err)
	}
	if _, err := e.store.Claim(ctx, storekit.ClaimRequest{Key: storeKey, Nonce: "n", LeaseTTL: time.Minute, TakeoverAfter: 30 * time.Second}); err != nil {
		b.Fatal(err)
	}
	if err := e.store.Complete(ctx, storeKey, "n", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("42"), TTL: time.Hour}); err != nil {
		b.Fatal(err)
	}
	if _, err := g.Do(ctx, "guard-replay", func(context.Context) (int, error) { return 42, nil }); err != nil {
		b.Fatal(err)
	}
	runVariants(b, e, []*variant{
		{name: "raw", fn: func(int) error {
			err := rawPut(ctx, e.client, rawPK, "other")
			if _, refused := conditionFailedErr(err); !refused {
				return err
			}
			return nil
		}},
		{name: "store", fn: func(int) error {
			res, err := e.store.Claim(ctx, storekit.ClaimRequest{Key: storeKey, Nonce: "other", LeaseTTL: time.Minute, TakeoverAfter: 30 * time.Second})
			if err == nil && res.Outcome != storekit.Existing {
				b.Fatalf("outcome %v", res.Outcome)
			}
			return err
		}},
		{name: "guard", fn: func(int) error {
			v, err := g.Do(ctx, "guard-replay", func(context.Context) (int, error) { return -1, nil })
			if err == nil && v != 42 {
				b.Fatalf("replayed %d", v)
			}
			return err
		}},
	}, 0)
}

func conditionFailedErr(err error) (*types.ConditionalCheckFailedException, bool) {
	var ccf *types.ConditionalCheckFailedException
	if err != nil && errors.As(err, &ccf) {
		return ccf, true
	}
	return nil, false
}

// BenchmarkDoTx: a DoTx whose fn puts one item, fresh and replayed. Raw:
// one TransactWriteItems with the item and a conditioned Put of the
// record (what a fresh one-request DoTx sends). Two-request: DoTx on a
// Store without WithOneRequest (the claim, then the transaction). One
// request: DoTx WithOneRequest. The replays repeat the call on one key.
func BenchmarkDoTx(b *testing.B) {
	e := newEnv(b)
	table := rowsTable(b, e.client)
	one, err := dynamostore.New(e.client, testTable, dynamostore.WithKeyPrefix(e.prefix), dynamostore.WithOneRequest())
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	g2, err := idem.New[int](e.store)
	if err != nil {
		b.Fatal(err)
	}
	g1, err := idem.New[int](one)
	if err != nil {
		b.Fatal(err)
	}
	run := randHex(4)
	key := func(kind string, i int) string { return kind + run + "-" + strconv.Itoa(i) }
	fn := func(k string) func(context.Context, *dynamostore.Tx) (int, error) {
		return func(_ context.Context, tx *dynamostore.Tx) (int, error) { return 42, putRow(tx, table, k, "w") }
	}
	rawTx := func(pk string) error {
		_, err := e.client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
			{Put: &types.Put{TableName: aws.String(table), Item: map[string]types.AttributeValue{
				"pk": &types.AttributeValueMemberS{Value: "row#" + pk}, "sk": &types.AttributeValueMemberS{Value: "w"}}}},
			{Put: &types.Put{TableName: aws.String(testTable), Item: rawRecord(pk, "n", time.Now().UnixMilli()),
				ConditionExpression:                 aws.String("attribute_not_exists(pk)"),
				ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}},
		}})
		return err
	}
	for _, k := range []string{"replay-2", "replay-1"} {
		g := map[string]*idem.Guard[int]{"replay-2": g2, "replay-1": g1}[k]
		if _, err := dynamostore.DoTx(ctx, g, k, fn(k)); err != nil {
			b.Fatal(err)
		}
	}
	if err := rawTx(e.prefix + "raw-replay"); err != nil {
		b.Fatal(err)
	}
	runVariants(b, e, []*variant{
		{name: "raw", fn: func(i int) error { return rawTx(e.prefix + key("raw", i)) }},
		{name: "two-request", fn: func(i int) error {
			_, err := dynamostore.DoTx(ctx, g2, key("two", i), fn(key("two", i)))
			return err
		}},
		{name: "one-request", fn: func(i int) error {
			_, err := dynamostore.DoTx(ctx, g1, key("one", i), fn(key("one", i)))
			return err
		}},
		{name: "raw-replay", fn: func(int) error {
			var tce *types.TransactionCanceledException
			if err := rawTx(e.prefix + "raw-replay"); !errors.As(err, &tce) {
				return fmt.Errorf("raw replay: %v", err)
			}
			return nil
		}},
		{name: "two-request-replay", fn: func(int) error {
			_, err := dynamostore.DoTx(ctx, g2, "replay-2", fn("replay-2"))
			return err
		}},
		{name: "one-request-replay", fn: func(int) error {
			_, err := dynamostore.DoTx(ctx, g1, "replay-1", fn("replay-1"))
			return err
		}},
	}, 0)
}
