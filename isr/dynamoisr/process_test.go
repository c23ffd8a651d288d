package dynamoisr_test

import (
	"context"
	"errors"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/internal/isrtesting"
	"github.com/idem-go/idem/isr/isrtest"
)

// newDynamoBackend is a fresh DynamoDB table shared by the test processes.
func newDynamoBackend(t *testing.T) *isrtesting.ProcBackend {
	client, _ := dynamoClient(t)
	return openDynamoBackend(t, freshTable(t, client))
}

// openDynamoBackend is the table named table, with counters in an item of
// their own beside the ISR items.
func openDynamoBackend(t *testing.T, table string) *isrtesting.ProcBackend {
	client, _ := dynamoClient(t)
	return &isrtesting.ProcBackend{
		Table: mustDynamoTable(t, client, table),
		Add: func(ctx context.Context, pk, name string, delta int64) (int64, error) {
			return dynamoCounter(ctx, client, table, pk, name, delta)
		},
		Env: []string{"ISR_LOCATION=" + table},
	}
}

// dynamoCounter adds delta to a counter item of its own beside the ISR
// items and returns the new value.
func dynamoCounter(ctx context.Context, client *dynamodb.Client, table, pk, name string, delta int64) (int64, error) {
	out, err := client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName: aws.String(table),
		Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "TEST#" + pk},
			"sk": &types.AttributeValueMemberS{Value: "COUNTERS"},
		},
		UpdateExpression:          aws.String("ADD #c :d"),
		ExpressionAttributeNames:  map[string]string{"#c": name},
		ExpressionAttributeValues: map[string]types.AttributeValue{":d": &types.AttributeValueMemberN{Value: strconv.FormatInt(delta, 10)}},
		ReturnValues:              types.ReturnValueUpdatedNew,
	})
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(out.Attributes[name].(*types.AttributeValueMemberN).Value, 10, 64)
}

// TestHelperProcess is the worker process of the tests below; it does
// nothing in a normal test run.
func TestHelperProcess(t *testing.T) {
	isrtesting.HelperProcess(t, func(t *testing.T) *isrtesting.ProcBackend {
		return openDynamoBackend(t, os.Getenv("ISR_LOCATION"))
	})
}

func TestLeaseContentionAcrossProcesses(t *testing.T) {
	isrtesting.RunLeaseContention(t, newDynamoBackend(t))
}

func TestOneRegenerationAcrossProcesses(t *testing.T) {
	isrtesting.RunOneRegeneration(t, newDynamoBackend(t))
}

// TestDynamoPausedWriter: a worker process acquires the lease and is
// stopped with SIGSTOP mid-regeneration; its lease expires, the parent
// takes over and publishes; the worker is resumed and tries to publish. It
// must be refused with ErrLeaseLost, and META must hold the parent's page.
func TestDynamoPausedWriter(t *testing.T) {
	b := newDynamoBackend(t)
	tb := b.Table
	pk := isrtest.NewPK(t)
	isrtesting.SeedStale(t, tb, pk)

	ch := isrtesting.StartChild(t, "paused-writer", append(b.Env, "ISR_PK="+pk)...)
	exp, err := strconv.ParseInt(ch.Expect(t, "ACQUIRED", 30*time.Second), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	ch.Stop(t)       // stopped before "GO" can reach it
	ch.Send(t, "GO") // buffered in the pipe until the child runs again

	ctx := context.Background()
	c := mustCoordinator(t, tb, isr.WithLeaseDuration(30*time.Second))
	seen, err := c.Lookup(ctx, pk)
	if err != nil {
		t.Fatal(err)
	}
	// While the paused child's lease lives, nobody else can take it (checked
	// only with a second to spare, so a slow request cannot cross expiry).
	if time.Now().Add(time.Second).Unix() < exp {
		if _, err := c.TryAcquire(ctx, pk, &seen); !errors.Is(err, isr.ErrLeaseHeld) {
			t.Fatalf("acquire during the child's lease: want ErrLeaseHeld, got %v", err)
		}
	}
	for time.Now().Unix() < exp { // held iff lease_expires_at > now
		time.Sleep(50 * time.Millisecond)
	}
	l, err := c.TryAcquire(ctx, pk, &seen)
	if err != nil {
		t.Fatalf("takeover after expiry: %v", err)
	}
	mine, err := c.Publish(ctx, l, isr.Page{S3Key: "new-owner", ETag: `"parent"`, RevalidateSeconds: 60})
	if err != nil {
		t.Fatal(err)
	}
	ch.Continue(t)
	if got := ch.Expect(t, "RESULT", 30*time.Second); got != "LEASE_LOST" {
		t.Fatalf("paused writer after takeover: %s, want LEASE_LOST", got)
	}
	if got, err := c.Lookup(ctx, pk); err != nil || got != mine {
		t.Fatalf("META = %+v (%v), want the new owner's %+v", got, err, mine)
	}
}

// TestDynamoPausedWriterBeforePublish: as above, but the child resumes
// after the takeover and before the new owner publishes. The token alone
// refuses it (the new owner's lease is live), and the new owner can still
// publish afterwards.
func TestDynamoPausedWriterBeforePublish(t *testing.T) {
	b := newDynamoBackend(t)
	tb := b.Table
	pk := isrtest.NewPK(t)
	isrtesting.SeedStale(t, tb, pk)

	ch := isrtesting.StartChild(t, "paused-writer", append(b.Env, "ISR_PK="+pk)...)
	exp, err := strconv.ParseInt(ch.Expect(t, "ACQUIRED", 30*time.Second), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	ch.Stop(t) // stopped before "GO" can reach it
	ch.Send(t, "GO")
	ctx := context.Background()
	c := mustCoordinator(t, tb, isr.WithLeaseDuration(30*time.Second))
	seen, _ := c.Lookup(ctx, pk)
	for time.Now().Unix() < exp {
		time.Sleep(50 * time.Millisecond)
	}
	l, err := c.TryAcquire(ctx, pk, &seen)
	if err != nil {
		t.Fatal(err)
	}
	ch.Continue(t)
	if got := ch.Expect(t, "RESULT", 30*time.Second); got != "LEASE_LOST" {
		t.Fatalf("paused writer: %s, want LEASE_LOST", got)
	}
	if got, _ := c.Lookup(ctx, pk); got != seen {
		t.Fatalf("META changed by the stale writer: %+v", got)
	}
	mine, err := c.Publish(ctx, l, isr.Page{S3Key: "new-owner", RevalidateSeconds: 60})
	if err != nil {
		t.Fatalf("new owner's publish after the stale attempt: %v", err)
	}
	if got, _ := c.Lookup(ctx, pk); got != mine {
		t.Fatalf("META = %+v, want %+v", got, mine)
	}
}
