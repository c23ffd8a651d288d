package isr_test

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/isrtest"
	"github.com/idem-go/idem/isr/redisisr"
)

// serverLoad is one round of what leaves garbage in a table: leases of
// crashed workers on fresh cache keys, requests begun and never finished,
// and one publication of each page (pagesA with recipe A, pagesB with
// recipe B, each superseding a VER# row). It returns the cache keys it
// left a LOCK or REQ# on.
func serverLoad(t *testing.T, tb isr.Table, clock func() time.Time, pagesA, pagesB []string, crashed int) []string {
	t.Helper()
	ctx := context.Background()
	opts := []isr.Option{isr.WithClock(clock), isr.WithLeaseDuration(time.Second), isr.WithTTLBuffer(time.Second), isr.WithRequestTTL(time.Second)}
	coordA := mustCoordinator(t, tb, opts...)
	coordB := mustCoordinator(t, tb, append(opts, isr.WithPointerSwap())...)
	var left []string
	for range crashed {
		pk := isrtest.NewPK(t)
		if _, err := coordA.TryAcquire(ctx, pk, nil); err != nil {
			t.Fatal(err)
		}
		now := clock()
		if _, _, err := tb.BeginRequest(ctx, isr.BeginRequestInput{PK: pk, Key: "abandoned", Hash: "h", Now: now, TTL: now.Unix() + 1}); err != nil {
			t.Fatal(err)
		}
		left = append(left, pk)
	}
	publish := func(c *isr.Coordinator, pk string) {
		l, err := c.TryAcquire(ctx, pk, nil)
		if err != nil {
			t.Fatal(err)
		}
		page := isr.Page{S3Key: "pages/" + pk, RevalidateSeconds: 60}
		if m, err := c.Lookup(ctx, pk); err == nil {
			page.BaseVersion, page.BaseSK = m.Version, m.CurrentSK
		}
		if _, err := c.Publish(ctx, l, page); err != nil {
			t.Fatal(err)
		}
	}
	for _, pk := range pagesA {
		publish(coordA, pk)
	}
	for _, pk := range pagesB {
		publish(coordB, pk)
	}
	return left
}

func newPKs(t *testing.T, n int) []string {
	pks := make([]string, n)
	for i := range pks {
		pks[i] = isrtest.NewPK(t)
	}
	return pks
}

// TestRedisTableLifecycle: every LOCK, REQ# and superseded VER# item the
// Redis table writes carries a native expiry at its ttl, and the server
// removes them: after each round the keys return to the pages' META and
// current VER# rows. Each round waits for the ttl of what it wrote (about
// 3s: lease 1s rounded up + buffer 1s).
func TestRedisTableLifecycle(t *testing.T) {
	client := redisClient(t)
	prefix := redisPrefix(t, client)
	tb, err := redisisr.NewTable(client, redisisr.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pagesA, pagesB := newPKs(t, 2), newPKs(t, 2)
	keys := func() []string {
		var ks []string
		iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			ks = append(ks, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		return ks
	}
	var counts []int
	for round := range 3 {
		start := time.Now()
		serverLoad(t, tb, time.Now, pagesA, pagesB, 30)
		for _, k := range keys() {
			ttl, err := client.PTTL(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			sk, cur := k[strings.LastIndex(k, "}:")+2:], ""
			if strings.HasPrefix(sk, isr.VersionSKPrefix) {
				cur, _ = client.HGet(ctx, k[:strings.LastIndex(k, "}:")+2]+isr.SKMeta, "current_sk").Result()
			}
			lives := sk == isr.SKMeta || sk == cur
			switch {
			case lives && ttl != -1:
				t.Fatalf("round %d: %s has expiry %v; META and the current VER# must have none", round, sk, ttl)
			case !lives && (ttl == -1 || ttl > 3*time.Second):
				// (-2: expired since the scan.)
				t.Fatalf("round %d: %s has expiry %v; want one within its ttl (<= 3s)", round, sk, ttl)
			}
		}
		// Everything written expires within 3s of its write; poll from
		// the end of the load, allowing 3s more for a slow machine.
		end := time.Now()
		n := len(keys())
		for n != 2*len(pagesA)+len(pagesB) && time.Since(end) < 6*time.Second {
			time.Sleep(100 * time.Millisecond)
			n = len(keys())
		}
		counts = append(counts, n)
		_ = start
	}
	for _, c := range counts {
		if c != 2*len(pagesA)+len(pagesB) {
			t.Fatalf("keys after each round's ttl: %v; want %d (META of 4 pages, current VER# of 2)", counts, 2*len(pagesA)+len(pagesB))
		}
	}
}

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
	pagesA, pagesB := newPKs(t, 2), newPKs(t, 2)
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
		serverLoad(t, tb, time.Now, pagesA, pagesB, 10)
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
