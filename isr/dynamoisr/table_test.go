package dynamoisr_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/dynamoisr"
	"github.com/idem-go/idem/isr/isrtest"
)

// requestCounter counts the requests a DynamoDB client sends, by operation,
// with SDK middleware (so retries of one call count once per attempt sent).
type requestCounter struct {
	total atomic.Int64
	ops   [16]atomic.Int64
}

var opIndex = map[string]int{"GetItem": 0, "PutItem": 1, "UpdateItem": 2, "DeleteItem": 3, "TransactWriteItems": 4}

func (c *requestCounter) middleware(stack *middleware.Stack) error {
	return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("isrRequestCounter",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			c.total.Add(1)
			if i, ok := opIndex[middleware.GetOperationName(ctx)]; ok {
				c.ops[i].Add(1)
			}
			return next.HandleFinalize(ctx, in)
		}), middleware.After)
}

// dynamoClient returns a client for DynamoDB Local, and a counter of the
// requests it sends.
func dynamoClient(t testing.TB) (*dynamodb.Client, *requestCounter) {
	t.Helper()
	endpoint := testenv.DynamoDBEndpoint(t)
	rc := &requestCounter{}
	client := dynamodb.New(dynamodb.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(endpoint),
		Credentials:      credentials.NewStaticCredentialsProvider("local", "local", ""),
		APIOptions:       []func(*middleware.Stack) error{rc.middleware},
		RetryMaxAttempts: 3,
	})
	return client, rc
}

// freshTable creates a new, uniquely named table with the ISR shape and
// deletes it when the test ends.
func freshTable(t testing.TB, client *dynamodb.Client) string {
	t.Helper()
	return createTable(t, client, false)
}

// newTTLTable is freshTable with TTL deletion left on, as CreateTable
// sets it.
func newTTLTable(t testing.TB, client *dynamodb.Client) string {
	t.Helper()
	return createTable(t, client, true)
}

func createTable(t testing.TB, client *dynamodb.Client, keepTTL bool) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := "isr-test-" + hex.EncodeToString(b[:])
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := dynamoisr.CreateTable(ctx, client, name); err != nil {
		t.Fatal(err)
	}
	// Idempotent: a second call on the existing table succeeds.
	if err := dynamoisr.CreateTable(ctx, client, name); err != nil {
		t.Fatalf("CreateTable on an existing table: %v", err)
	}
	// CreateTable turns TTL deletion on; DynamoDB Local carries it out
	// within seconds. Tests here read and write with clocks far from the
	// server's (isrtest.Base() is in 2023), whose items it would delete at
	// once: they run with TTL off (newTTLTable keeps it on).
	if !keepTTL {
		_, err := client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
			TableName:               aws.String(name),
			TimeToLiveSpecification: &types.TimeToLiveSpecification{AttributeName: aws.String("ttl"), Enabled: aws.Bool(false)},
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	})
	return name
}

func TestDynamoTableConformance(t *testing.T) {
	client, _ := dynamoClient(t)
	isrtest.Run(t, func(t *testing.T) isr.Table {
		return mustDynamoTable(t, client, freshTable(t, client))
	})
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }

// lostPutReply is a Client whose PutItem requests reach the table but
// whose first reply is lost, so the request is sent again (as the SDK's
// retryer does after a timeout).
type lostPutReply struct {
	dynamoisr.Client
}

func (l lostPutReply) PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if _, err := l.Client.PutItem(ctx, in, optFns...); err != nil {
		return nil, err
	}
	return l.Client.PutItem(ctx, in, optFns...)
}

// An acquire whose reply was lost and whose retry then finds the LOCK item
// it wrote itself (its own random token) holds the lease: it is not
// "held by another worker".
func TestDynamoAcquireRetriedAfterLostReply(t *testing.T) {
	client, _ := dynamoClient(t)
	tb := mustDynamoTable(t, lostPutReply{client}, freshTable(t, client))
	ctx := context.Background()
	pk := isrtest.NewPK(t)
	now := time.Now()
	in := isr.AcquireInput{PK: pk, Token: "tok-1", Now: now, ExpiresAt: now.Unix() + 30, TTL: now.Unix() + 90}
	l, err := tb.AcquireLease(ctx, in)
	if err != nil {
		t.Fatalf("AcquireLease after a lost reply: %v", err)
	}
	if l != (isr.Lease{PK: pk, Token: "tok-1", ExpiresAt: in.ExpiresAt, TTL: in.TTL}) {
		t.Fatalf("lease = %+v", l)
	}
	// Another worker's token is still refused.
	in.Token = "tok-2"
	if _, err := tb.AcquireLease(ctx, in); !errors.Is(err, isr.ErrLeaseHeld) {
		t.Fatalf("second worker: %v, want ErrLeaseHeld", err)
	}
}

// A META written by another service with an explicit "version": 0 is the
// same as a META without version: a recipe-B publish expecting version 0
// succeeds and writes version 1.
func TestDynamoPointerPublishOverExplicitVersionZero(t *testing.T) {
	client, _ := dynamoClient(t)
	name := freshTable(t, client)
	tb := mustDynamoTable(t, client, name)
	ctx := context.Background()
	pk := isrtest.NewPK(t)
	now := time.Now()
	_, err := client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(name), Item: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: isr.SKMeta},
		"s3_key":             &types.AttributeValueMemberS{Value: "old"},
		"generated_at":       &types.AttributeValueMemberN{Value: strconv.FormatInt(now.Unix()-100, 10)},
		"revalidate_seconds": &types.AttributeValueMemberN{Value: "10"},
		"version":            &types.AttributeValueMemberN{Value: "0"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	seen, err := tb.GetMeta(ctx, pk)
	if err != nil || seen.Version != 0 {
		t.Fatalf("GetMeta = %+v, %v", seen, err)
	}
	l, err := tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: "t", Now: now, ExpiresAt: now.Unix() + 30, TTL: now.Unix() + 90})
	if err != nil {
		t.Fatal(err)
	}
	in := isr.PublishPointerInput{Lease: l, Now: now, Version: isr.Version{ID: "v1", S3Key: "new", GeneratedAt: now.Unix()}, RevalidateSeconds: 10, ExpectedVersion: seen.Version}
	m, err := tb.PublishPointer(ctx, in)
	if err != nil {
		t.Fatalf("PublishPointer over version 0: %v", err)
	}
	if m.Version != 1 {
		t.Fatalf("META = %+v", m)
	}
}

// A recipe-B publish whose superseded row is gone already (TTL deletion,
// another service) publishes all the same, without a ttl-only stub row in
// its place; a refused publish with the retire item reports the recipe's
// reasons alone.
func TestDynamoPointerPublishPreviousGone(t *testing.T) {
	client, _ := dynamoClient(t)
	name := freshTable(t, client)
	tb := mustDynamoTable(t, client, name)
	ctx := context.Background()
	pk := isrtest.NewPK(t)
	now := time.Now()
	acquire := func(tok string) isr.Lease {
		l, err := tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: tok, Now: now, ExpiresAt: now.Unix() + 30, TTL: now.Unix() + 90})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	if _, err := tb.PublishPointer(ctx, isr.PublishPointerInput{Lease: acquire("a"), Now: now, Version: isr.Version{ID: "v1", S3Key: "k1", GeneratedAt: now.Unix()}, RevalidateSeconds: 10}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.DeleteItem(ctx, &dynamodb.DeleteItemInput{TableName: aws.String(name), Key: map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: pk}, "sk": &types.AttributeValueMemberS{Value: "VER#v1"},
	}}); err != nil {
		t.Fatal(err)
	}
	l := acquire("b")
	in := isr.PublishPointerInput{Lease: l, Now: now, Version: isr.Version{ID: "v2", S3Key: "k2", GeneratedAt: now.Unix()}, RevalidateSeconds: 10, ExpectedVersion: 1, Previous: "VER#v1", PreviousTTL: now.Unix() + 60}
	// Refused for its version: the reasons are LOCK, VER#, META.
	bad := in
	bad.ExpectedVersion = 7
	_, err := tb.PublishPointer(ctx, bad)
	var te *isr.TxError
	if !errors.As(err, &te) || !errors.Is(err, isr.ErrVersionConflict) || len(te.Reasons) != 3 {
		t.Fatalf("refused publish: %v (%#v), want ErrVersionConflict with 3 reasons", err, te)
	}
	m, err := tb.PublishPointer(ctx, in)
	if err != nil || m.CurrentSK != "VER#v2" {
		t.Fatalf("publish over a gone row: %+v, %v", m, err)
	}
	if _, err := tb.GetVersion(ctx, pk, "v1"); !errors.Is(err, isr.ErrNotFound) {
		t.Fatalf("VER#v1: %v, want no stub row", err)
	}
}
