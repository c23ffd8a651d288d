package dynamoisr_test

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/internal/isrtesting"
)

// TestDynamoTableLifecycle: CreateTable turns TTL on for the ttl
// attribute, and every LOCK, REQ# and superseded VER# item isr writes
// carries a ttl at or after the moment it stops deciding anything (a
// LOCK's at least lease_expires_at + buffer), while META and the current
// VER# row (no WithMetaTTL) carry none: after each round, the items
// without a ttl are the pages' META and current VER# rows. With
// IDEM_SOAK=1 it then waits for the server's TTL deletion to remove the
// rest (DynamoDB Local took 51s in one run).
func TestDynamoTableLifecycle(t *testing.T) {
	client, _ := dynamoClient(t)
	name := newTTLTable(t, client)
	ctx := context.Background()
	ttlDesc, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	if d := ttlDesc.TimeToLiveDescription; d == nil || aws.ToString(d.AttributeName) != "ttl" ||
		(d.TimeToLiveStatus != types.TimeToLiveStatusEnabled && d.TimeToLiveStatus != types.TimeToLiveStatusEnabling) {
		t.Fatalf("TTL of the created table: %+v, want enabled on ttl", d)
	}
	tb := mustDynamoTable(t, client, name)
	pagesA, pagesB := isrtesting.NewPKs(t, 2), isrtesting.NewPKs(t, 2)
	want := 2*len(pagesA) + len(pagesB) // META of 4 pages, current VER# of 2
	scan := func() []map[string]types.AttributeValue {
		out, err := client.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(name), ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		return out.Items
	}
	str := func(it map[string]types.AttributeValue, a string) string {
		v, _ := it[a].(*types.AttributeValueMemberS)
		if v == nil {
			return ""
		}
		return v.Value
	}
	var kept []int
	for round := range 3 {
		isrtesting.ServerLoad(t, tb, time.Now, pagesA, pagesB, 10)
		items := scan()
		current := map[string]string{}
		for _, it := range items {
			if str(it, "sk") == isr.SKMeta {
				current[str(it, "pk")] = str(it, "current_sk")
			}
		}
		noTTL := 0
		for _, it := range items {
			pk, sk := str(it, "pk"), str(it, "sk")
			ttl, hasTTL := it["ttl"].(*types.AttributeValueMemberN)
			lives := sk == isr.SKMeta || sk == current[pk]
			switch {
			case lives && hasTTL:
				t.Fatalf("round %d: %s/%s has ttl %s; META and the current VER# must have none", round, pk, sk, ttl.Value)
			case !lives && !hasTTL:
				t.Fatalf("round %d: %s/%s has no ttl: it would never be removed", round, pk, sk)
			case sk == isr.SKLock:
				ttlN, _ := strconv.ParseInt(ttl.Value, 10, 64)
				exp, _ := strconv.ParseInt(it["lease_expires_at"].(*types.AttributeValueMemberN).Value, 10, 64)
				if ttlN < exp+1 {
					t.Fatalf("round %d: LOCK ttl %d not at least lease_expires_at %d + buffer 1s", round, ttlN, exp)
				}
			}
			if !hasTTL {
				noTTL++
			}
		}
		kept = append(kept, noTTL)
	}
	for _, n := range kept {
		if n != want {
			t.Fatalf("items without ttl after each round: %v; want %d", kept, want)
		}
	}
	if os.Getenv("IDEM_SOAK") == "" {
		return // the server's deletion takes up to a minute on DynamoDB Local
	}
	start := time.Now()
	for n := len(scan()); n != want; n = len(scan()) {
		if time.Since(start) > 3*time.Minute {
			t.Fatalf("%d items 3 minutes after their ttl, want %d: expired items are not deleted (TTL off?)", n, want)
		}
		time.Sleep(time.Second)
	}
	t.Logf("expired items deleted by the server %v after the last round", time.Since(start).Round(100*time.Millisecond))
}
