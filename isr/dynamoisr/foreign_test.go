package dynamoisr_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/internal/isrtesting"
	"github.com/idem-go/idem/isr/isrtest"
)

type item = map[string]types.AttributeValue

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }
func n(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }

func putItems(t *testing.T, client *dynamodb.Client, table string, items ...item) {
	t.Helper()
	for _, it := range items {
		if _, err := client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(table), Item: it}); err != nil {
			t.Fatal(err)
		}
	}
}

// Items other services write, as the seeds' recipes write them.
func TestDynamoForeignItems(t *testing.T) {
	client, _ := dynamoClient(t)
	name := freshTable(t, client)
	tb := mustDynamoTable(t, client, name)
	ctx := context.Background()
	now := time.Now()
	unix := strconv.FormatInt(now.Unix(), 10)

	t.Run("pointer-only META follows current_sk", func(t *testing.T) {
		pk := isrtest.NewPK(t)
		putItems(t, client, name,
			item{"pk": s(pk), "sk": s("VER#v7"), "s3_key": s("pages/v7"), "generated_at": n(unix), "etag": s(`"e7"`), "revalidate_seconds": n("60")},
			item{"pk": s(pk), "sk": s(isr.SKMeta), "current_sk": s("VER#v7")},
		)
		m, err := tb.GetMeta(ctx, pk)
		if err != nil {
			t.Fatalf("GetMeta: %v", err)
		}
		if m.S3Key != "pages/v7" || m.ETag != `"e7"` || m.GeneratedAt != now.Unix() || m.RevalidateSeconds != 60 || m.CurrentSK != "VER#v7" {
			t.Fatalf("META = %+v", m)
		}
	})
	t.Run("pointer swapped over a recipe-A META serves the pointed version", func(t *testing.T) {
		pk := isrtest.NewPK(t)
		putItems(t, client, name,
			item{"pk": s(pk), "sk": s(isr.SKMeta), "s3_key": s("pages/old"), "generated_at": n("1000"), "etag": s(`"old"`), "revalidate_seconds": n("60")},
			item{"pk": s(pk), "sk": s("VER#v2"), "s3_key": s("pages/v2"), "generated_at": n(unix), "etag": s(`"e2"`)},
		)
		if _, err := client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(name), Key: item{"pk": s(pk), "sk": s(isr.SKMeta)},
			UpdateExpression:          aws.String("SET current_sk = :c"),
			ExpressionAttributeValues: item{":c": s("VER#v2")},
		}); err != nil {
			t.Fatal(err)
		}
		m, err := tb.GetMeta(ctx, pk)
		if err != nil || m.S3Key != "pages/v2" || m.ETag != `"e2"` || m.GeneratedAt != now.Unix() || m.RevalidateSeconds != 60 {
			t.Fatalf("GetMeta = %+v, %v", m, err)
		}
	})
	t.Run("pointer to a missing row is corrupt", func(t *testing.T) {
		pk := isrtest.NewPK(t)
		putItems(t, client, name, item{"pk": s(pk), "sk": s(isr.SKMeta), "current_sk": s("VER#gone")})
		if _, err := tb.GetMeta(ctx, pk); !errors.Is(err, isr.ErrCorruptItem) {
			t.Fatalf("GetMeta = %v, want ErrCorruptItem", err)
		}
	})
	t.Run("lease_expires_at of another type is corrupt on acquire", func(t *testing.T) {
		pk := isrtest.NewPK(t)
		putItems(t, client, name, item{"pk": s(pk), "sk": s(isr.SKLock), "lease_token": s("x"), "lease_expires_at": s("1"), "ttl": n("1")})
		_, err := tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "t", Now: now, ExpiresAt: now.Unix() + 30, TTL: now.Unix() + 90})
		if !errors.Is(err, isr.ErrCorruptItem) || errors.Is(err, isr.ErrLeaseHeld) {
			t.Fatalf("AcquireLease = %v, want ErrCorruptItem", err)
		}
		if _, err := tb.GetLease(ctx, pk); !errors.Is(err, isr.ErrCorruptItem) {
			t.Fatalf("GetLease = %v, want ErrCorruptItem", err)
		}
	})
	t.Run("ttl of another type decides nothing", func(t *testing.T) {
		pk := isrtest.NewPK(t)
		putItems(t, client, name, item{"pk": s(pk), "sk": s(isr.SKMeta), "s3_key": s("p"), "generated_at": n(unix), "revalidate_seconds": n("60"), "ttl": s("soon")})
		m, err := tb.GetMeta(ctx, pk)
		if err != nil || m.S3Key != "p" || m.TTL != 0 {
			t.Fatalf("GetMeta = %+v, %v", m, err)
		}
	})
}

func dynamoRaw(t *testing.T) isrtesting.RawTable {
	client, _ := dynamoClient(t)
	name := freshTable(t, client)
	return isrtesting.RawTable{
		Table: mustDynamoTable(t, client, name),
		Put: func(t *testing.T, pk, sk string, it map[string]any) {
			av := item{}
			var numbers []string
			for k, v := range it {
				if num, ok := v.(isrtesting.RawN); ok {
					av[k] = n(string(num))
					numbers = append(numbers, k)
				} else {
					av[k] = s(v.(string))
				}
			}
			_, err := client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(name), Item: av})
			if err != nil && (strings.Contains(err.Error(), "cannot be converted into a number") || strings.Contains(err.Error(), "Number overflow")) {
				// DynamoDB has no such number: written as the wrong type.
				for _, k := range numbers {
					av[k] = s(string(it[k].(isrtesting.RawN)))
				}
				_, err = client.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String(name), Item: av})
			}
			if err != nil {
				t.Fatal(err)
			}
		},
		Raw: func(t *testing.T, pk, sk string) map[string]any {
			out, err := client.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(name), Key: item{"pk": s(pk), "sk": s(sk)}, ConsistentRead: aws.Bool(true)})
			if err != nil {
				t.Fatal(err)
			}
			m := map[string]any{}
			for k, v := range out.Item {
				switch v := v.(type) {
				case *types.AttributeValueMemberS:
					m[k] = v.Value
				case *types.AttributeValueMemberN:
					m[k] = isrtesting.RawN(v.Value)
				default:
					m[k] = v
				}
			}
			return m
		},
	}
}

func TestDynamoForeignItemsShared(t *testing.T) { isrtesting.RunForeignItems(t, dynamoRaw(t)) }
