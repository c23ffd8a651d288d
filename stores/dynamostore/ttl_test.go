package dynamostore_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-go/idem/stores/dynamostore"
)

// TestTTLRemovesExpiredItems: the store writes no clean-up of its own;
// DynamoDB's TTL deletion on "ttl", which CreateTable turns on, removes
// the items of expired records. 50 completed records whose ttl (expiry
// plus the retention) passed an hour ago, written with a clock two hours
// behind, and 5 live ones: the expired items vanish (DynamoDB Local sweeps
// within about a minute when little else has expired; the test waits up
// to five) and the live ones stay. It runs with IDEM_SOAK=1 only: the
// sweep removes items at its own pace, and in one full test run, behind
// the expired items every other test leaves on the shared table, 11 of
// the 50 were still there after five minutes.
func TestTTLRemovesExpiredItems(t *testing.T) {
	if os.Getenv("IDEM_SOAK") != "1" {
		t.Skip("set IDEM_SOAK=1 to wait for DynamoDB's TTL deletion")
	}
	t.Parallel()
	past := func() time.Time { return time.Now().Add(-2 * time.Hour) }
	old := newEnv(t, dynamostore.WithClock(past), dynamostore.WithRetention(time.Minute))
	live := newEnv(t)
	ctx := context.Background()
	done := storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("r"), TTL: time.Minute}
	var gone, kept []string
	for range 50 {
		k := storageKey()
		mustClaim(t, old.store, claimReq(k, "A"), storekit.Claimed)
		if err := old.store.Complete(ctx, k, "A", done); err != nil {
			t.Fatal(err)
		}
		gone = append(gone, old.prefix+k)
	}
	for range 5 {
		k := storageKey()
		mustClaim(t, live.store, claimReq(k, "A"), storekit.Claimed)
		if err := live.store.Complete(ctx, k, "A", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, live.prefix+k)
	}
	present := func(keys []string) int {
		n := 0
		for _, pk := range keys {
			out, err := old.client.Query(ctx, &dynamodb.QueryInput{
				TableName: aws.String(testTable), ConsistentRead: aws.Bool(true), Select: types.SelectCount,
				KeyConditionExpression:    aws.String("pk = :pk"),
				ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: pk}},
			})
			if err != nil {
				t.Fatal(err)
			}
			n += int(out.Count)
		}
		return n
	}
	start := time.Now()
	for present(gone) > 0 {
		if time.Since(start) > 5*time.Minute {
			t.Fatalf("%d of %d expired items still there after %v", present(gone), len(gone), time.Since(start).Round(time.Second))
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("%d expired items removed by the TTL deletion within %v", len(gone), time.Since(start).Round(time.Second))
	if n := present(kept); n != len(kept) {
		t.Fatalf("%d of %d live items left", n, len(kept))
	}
}
