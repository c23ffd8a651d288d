package dynamostore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-go/idem"
)

// TestMalformedItemsAreCorrupt: an item the Go validation calls corrupt
// is reported as corrupt by a claim, never taken over: a stale claim with
// a negative takeover_ms, and an expired item or a stale claim whose
// attempt is the largest int64 (a reclaim's update would add one on the
// server, run fn, and leave the item with an attempt past int64).
func TestMalformedItemsAreCorrupt(t *testing.T) {
	e := newEnv(t)
	g, err := idem.New[int](e.store, idem.WithTakeoverAfter(20*time.Millisecond), idem.WithHeartbeat(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	n := func(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }
	for _, tc := range []struct {
		name string
		set  map[string]types.AttributeValue
	}{
		{"negative takeover_ms on a stale claim", map[string]types.AttributeValue{"takeover_ms": n("-1"), "heartbeat_at": n("0"), "stale_at": n("0")}},
		{"largest attempt on an expired item", map[string]types.AttributeValue{"attempt": n("9223372036854775807"), "expires_at": n("1")}},
		{"largest attempt on a stale claim", map[string]types.AttributeValue{"attempt": n("9223372036854775807"), "heartbeat_at": n("0"), "stale_at": n("0")}},
	} {
		sk, err := guardinfo.StorageKey(g, tc.name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := e.store.Claim(ctx, storekit.ClaimRequest{Key: sk, Nonce: "owner", LeaseTTL: time.Hour, TakeoverAfter: time.Hour}); err != nil {
			t.Fatal(err)
		}
		expr, vals, i := "SET", map[string]types.AttributeValue{}, 0
		names := map[string]string{}
		for k, v := range tc.set {
			if i > 0 {
				expr += ","
			}
			p := string(rune('a' + i))
			expr += " #" + p + " = :" + p
			names["#"+p] = k
			vals[":"+p] = v
			i++
		}
		_, err = e.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(testTable),
			Key: map[string]types.AttributeValue{
				"pk": &types.AttributeValueMemberS{Value: e.prefix + sk},
				"sk": &types.AttributeValueMemberS{Value: "IDEM"},
			},
			UpdateExpression: aws.String(expr), ExpressionAttributeNames: names, ExpressionAttributeValues: vals,
		})
		if err != nil {
			t.Fatal(err)
		}
		ran := false
		_, err = g.Do(ctx, tc.name, func(context.Context) (int, error) { ran = true; return 1, nil })
		var cre *storekit.CorruptRecordError
		if !errors.As(err, &cre) {
			t.Errorf("%s: Do: %v, want a *storekit.CorruptRecordError", tc.name, err)
		}
		if ran {
			t.Errorf("%s: fn ran", tc.name)
		}
	}
}
