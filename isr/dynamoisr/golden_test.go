package dynamoisr_test

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/dynamoisr"
	"github.com/idem-go/idem/isr/isrtest"
)

var updateGolden = flag.Bool("update", false, "rewrite testdata golden items from DynamoDB Local")

// ddbJSON is an item in DynamoDB JSON: {"attr": {"S": "..."}}.
type ddbJSON map[string]map[string]string

func toJSON(t *testing.T, item map[string]types.AttributeValue) ddbJSON {
	t.Helper()
	out := ddbJSON{}
	for k, v := range item {
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			out[k] = map[string]string{"S": v.Value}
		case *types.AttributeValueMemberN:
			out[k] = map[string]string{"N": v.Value}
		default:
			t.Fatalf("attribute %s has type %T; the schema uses only S and N", k, v)
		}
	}
	return out
}

func fromJSON(t *testing.T, j ddbJSON) map[string]types.AttributeValue {
	t.Helper()
	item := map[string]types.AttributeValue{}
	for k, v := range j {
		if len(v) != 1 {
			t.Fatalf("attribute %s: want exactly one type, got %v", k, v)
		}
		for typ, val := range v {
			switch typ {
			case "S":
				item[k] = &types.AttributeValueMemberS{Value: val}
			case "N":
				item[k] = &types.AttributeValueMemberN{Value: val}
			default:
				t.Fatalf("attribute %s: unexpected type %s", k, typ)
			}
		}
	}
	return item
}

// schemaTypes is the DynamoDB type of every attribute the ISR schema
// (DESIGN.md, isr section) names.
var schemaTypes = map[string]string{
	"pk": "S", "sk": "S",
	"s3_key": "S", "generated_at": "N", "revalidate_seconds": "N", "etag": "S", "ttl": "N",
	"current_sk": "S", "version": "N",
	"lease_token": "S", "lease_expires_at": "N",
	"request_hash": "S", "status": "S", "result_s3_key": "S",
}

// volatile attributes are compared by shape, not value: they are random.
var volatile = map[string]*regexp.Regexp{
	"lease_token": regexp.MustCompile(`^[0-9a-f]{32}$`),
	"current_sk":  regexp.MustCompile(`^VER#[0-9]{10}-[0-9a-f]{8}$`),
}

func rawGet(t *testing.T, client *dynamodb.Client, table, pk, sk string) map[string]types.AttributeValue {
	t.Helper()
	out, err := client.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName:      aws.String(table),
		Key:            map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: sk}},
		ConsistentRead: aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Item) == 0 {
		t.Fatalf("no item %s/%s", pk, sk)
	}
	return out.Item
}

// compareGolden checks got against testdata/<name>.json attribute by
// attribute: the same names, the same type for each, the same value except
// for volatile attributes, which must match their shape.
func compareGolden(t *testing.T, name string, got ddbJSON, allowVolatileSK bool) {
	t.Helper()
	path := filepath.Join("testdata", name+".json")
	if *updateGolden {
		b, err := json.MarshalIndent(got, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var want ddbJSON
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var names []string
	for k := range want {
		names = append(names, k)
	}
	for k, v := range got {
		for typ := range v {
			if schemaTypes[k] != typ {
				t.Errorf("%s: attribute %s has type %s; the schema says %q", name, k, typ, schemaTypes[k])
			}
		}
		if _, ok := want[k]; !ok {
			t.Errorf("%s: unexpected attribute %s = %v", name, k, got[k])
		}
	}
	sort.Strings(names)
	for _, k := range names {
		w := want[k]
		g, ok := got[k]
		if !ok {
			t.Errorf("%s: missing attribute %s", name, k)
			continue
		}
		if len(g) != 1 || len(w) != 1 {
			t.Errorf("%s: attribute %s: malformed %v / %v", name, k, g, w)
			continue
		}
		for typ, wv := range w {
			gv, ok := g[typ]
			if !ok {
				t.Errorf("%s: attribute %s: type %v, want %s", name, k, g, typ)
				continue
			}
			re := volatile[k]
			if k == "sk" && allowVolatileSK {
				re = regexp.MustCompile(`^VER#[0-9]{10}-[0-9a-f]{8}$`)
			}
			if re != nil {
				if !re.MatchString(gv) {
					t.Errorf("%s: attribute %s = %q does not have the expected shape %s", name, k, gv, re)
				}
				continue
			}
			if gv != wv {
				t.Errorf("%s: attribute %s (%s) = %q, want %q", name, k, typ, gv, wv)
			}
		}
	}
}

// TestDynamoGoldenItems checks what Table writes, read back raw with
// GetItem, against the checked-in DynamoDB JSON fixtures, and that items in
// the fixtures' shape (as other services write them) are read back by the
// Table getters.
func TestDynamoGoldenItems(t *testing.T) {
	client, _ := dynamoClient(t)
	table := freshTable(t, client)
	tb := mustDynamoTable(t, client, table)
	ctx := context.Background()
	clock := isrtest.NewClock(isrtest.Base())
	base := isrtest.Base().Unix()

	compareWrittenItems(t, client, table, tb, clock)

	// Reading: every fixture, written raw as another service would, decodes.
	t.Run("ReadFixtures", func(t *testing.T) {
		for _, name := range []string{"lock", "meta", "meta_pointer", "req_started", "req_completed", "req_failed", "version"} {
			rpk := isrtest.NewPK(t)
			j := putFixture(t, client, table, name, rpk)
			if name == "meta_pointer" {
				// Recipe B: META's current_sk is followed to its VER# row,
				// so the pointed row is written under the same pk.
				putFixture(t, client, table, "version", rpk)
			}
			checkFixture(t, tb, name, rpk, j, base)
		}
	})

	// A wrongly typed attribute is a typed error, not a panic.
	t.Run("CorruptItem", func(t *testing.T) {
		rpk := isrtest.NewPK(t)
		_, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: rpk}, "sk": &types.AttributeValueMemberS{Value: "META"},
			"s3_key": &types.AttributeValueMemberS{Value: "k"}, "generated_at": &types.AttributeValueMemberS{Value: "yesterday"},
			"revalidate_seconds": &types.AttributeValueMemberN{Value: "60"},
		}})
		if err != nil {
			t.Fatal(err)
		}
		_, err = tb.GetMeta(ctx, rpk)
		var ce *isr.CorruptItemError
		if !errorsAs(err, &ce) || ce.Attr != "generated_at" {
			t.Fatalf("want *CorruptItemError on generated_at, got %v", err)
		}
	})
}

// putFixture writes the item of testdata/NAME.json under the partition
// key rpk, raw, as another service would, and returns the fixture.
func putFixture(t *testing.T, client *dynamodb.Client, table, name, rpk string) ddbJSON {
	b, err := os.ReadFile(filepath.Join("testdata", name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var j ddbJSON
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	item := fromJSON(t, j)
	item["pk"] = &types.AttributeValueMemberS{Value: rpk}
	if _, err := client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: item}); err != nil {
		t.Fatal(err)
	}
	return j
}

// checkFixture reads the item of fixture j (named name, written under rpk)
// back with the Table getter of its kind and checks its fields; base is
// the fixtures' instant in Unix seconds.
func checkFixture(t *testing.T, tb *dynamoisr.Table, name, rpk string, j ddbJSON, base int64) {
	ctx := context.Background()
	sk := j["sk"]["S"]
	switch {
	case sk == isr.SKMeta:
		m, err := tb.GetMeta(ctx, rpk)
		if err != nil || m.S3Key != j["s3_key"]["S"] || m.ETag != j["etag"]["S"] || m.CurrentSK != j["current_sk"]["S"] {
			t.Errorf("%s: GetMeta = %+v, %v", name, m, err)
		}
	case sk == isr.SKLock:
		l, err := tb.GetLease(ctx, rpk)
		if err != nil || l.Token != j["lease_token"]["S"] || l.ExpiresAt != base+30 {
			t.Errorf("%s: GetLease = %+v, %v", name, l, err)
		}
	case len(sk) > 4 && sk[:4] == isr.RequestSKPrefix:
		r, err := tb.GetRequest(ctx, rpk, sk[4:])
		if err != nil || string(r.Status) != j["status"]["S"] || r.Hash != j["request_hash"]["S"] || r.ResultS3Key != j["result_s3_key"]["S"] {
			t.Errorf("%s: GetRequest = %+v, %v", name, r, err)
		}
	default:
		v, err := tb.GetVersion(ctx, rpk, sk[4:])
		if err != nil || v.S3Key != j["s3_key"]["S"] || v.ETag != j["etag"]["S"] {
			t.Errorf("%s: GetVersion = %+v, %v", name, v, err)
		}
	}
}

// compareWrittenItems writes through tb (and Coordinators on it) every
// kind of item, reads each back raw and compares it with its fixture.
func compareWrittenItems(t *testing.T, client *dynamodb.Client, table string, tb *dynamoisr.Table, clock *isrtest.Clock) {
	ctx := context.Background()
	base := isrtest.Base().Unix()
	pk, err := isr.PK("t1", "/golden/page")
	if err != nil {
		t.Fatal(err)
	}
	c := mustCoordinator(t, tb, isr.WithClock(clock.Now), isr.WithLeaseDuration(30*time.Second),
		isr.WithTTLBuffer(time.Hour), isr.WithMetaTTL(24*time.Hour), isr.WithRequestTTL(24*time.Hour))
	lease, err := c.TryAcquire(ctx, pk, &isr.Meta{})
	if err != nil {
		t.Fatal(err)
	}
	compareGolden(t, "lock", toJSON(t, rawGet(t, client, table, pk, isr.SKLock)), false)

	if _, _, err := tb.BeginRequest(ctx, isr.BeginRequestInput{PK: pk, Key: "req-golden", Hash: isr.RequestHash("t1", "/golden/page"), Now: clock.Now(), TTL: base + 86400}); err != nil {
		t.Fatal(err)
	}
	compareGolden(t, "req_started", toJSON(t, rawGet(t, client, table, pk, "REQ#req-golden")), false)

	clock.Advance(5 * time.Second)
	// Publish recipe A with request completion, through the table so the
	// REQ# update is part of it.
	err = tb.Publish(ctx, isr.PublishInput{
		Lease: lease, Now: clock.Now(),
		Meta:    isr.Meta{S3Key: "isr/t1/golden/page.html", GeneratedAt: base + 5, RevalidateSeconds: 60, ETag: `"5d41402abc4b2a76b9719d911017c592"`, TTL: base + 5 + 86400},
		Request: &isr.RequestCompletion{Key: "req-golden", Hash: isr.RequestHash("t1", "/golden/page")},
	})
	if err != nil {
		t.Fatal(err)
	}
	compareGolden(t, "meta", toJSON(t, rawGet(t, client, table, pk, isr.SKMeta)), false)
	compareGolden(t, "req_completed", toJSON(t, rawGet(t, client, table, pk, "REQ#req-golden")), false)

	// A failed request.
	if _, _, err := tb.BeginRequest(ctx, isr.BeginRequestInput{PK: pk, Key: "req-failed", Hash: "h-failed", Now: clock.Now(), TTL: base + 86400}); err != nil {
		t.Fatal(err)
	}
	if err := tb.FailRequest(ctx, pk, "req-failed", "h-failed"); err != nil {
		t.Fatal(err)
	}
	compareGolden(t, "req_failed", toJSON(t, rawGet(t, client, table, pk, "REQ#req-failed")), false)

	// Recipe B on a single-tenant key.
	pkB, err := isr.PK("", "/golden/pointer")
	if err != nil {
		t.Fatal(err)
	}
	cb := mustCoordinator(t, tb, isr.WithClock(clock.Now), isr.WithPointerSwap(), isr.WithMetaTTL(24*time.Hour))
	res, err := cb.Regenerate(ctx, pkB, nil, func(context.Context, isr.Lease) (isr.Page, error) {
		return isr.Page{S3Key: "isr/golden/pointer-v1.html", ETag: `W/"v1"`, RevalidateSeconds: 300}, nil
	})
	if err != nil || res.Outcome != isr.OutcomeRegenerated {
		t.Fatalf("regenerate: %+v %v", res, err)
	}
	compareGolden(t, "meta_pointer", toJSON(t, rawGet(t, client, table, pkB, isr.SKMeta)), false)
	compareGolden(t, "version", toJSON(t, rawGet(t, client, table, pkB, res.Meta.CurrentSK)), true)
}
