package isr_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/gofrs/flock"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/redisisr"
)

// procBackends are the shared tables the multi-process tests run on.
var procBackends = []string{"dynamo", "redis", "file"}

// procBackend is the storage several test processes share: an ISR table,
// and counters every process can bump atomically (to count holders and
// renders across processes). env tells a child process how to open the
// same backend (procBackendFromEnv).
type procBackend struct {
	tb  isr.Table
	add func(ctx context.Context, pk, name string, delta int64) (int64, error)
	env []string
}

// newProcBackend creates a fresh backend of kind for the parent process.
func newProcBackend(t *testing.T, kind string) *procBackend {
	t.Helper()
	switch kind {
	case "dynamo":
		client, _ := dynamoClient(t)
		return openProcBackend(t, kind, freshTable(t, client))
	case "redis":
		c := redisClient(t)
		return openProcBackend(t, kind, redisPrefix(t, c))
	case "file":
		return openProcBackend(t, kind, t.TempDir())
	}
	t.Fatalf("unknown backend %q", kind)
	return nil
}

// procBackendFromEnv opens, in a child process, the backend its parent
// named in the environment.
func procBackendFromEnv(t *testing.T) *procBackend {
	return openProcBackend(t, os.Getenv("ISR_BACKEND"), os.Getenv("ISR_LOCATION"))
}

// openProcBackend opens the backend of kind at location: a DynamoDB table
// name, a Redis key prefix or a directory.
func openProcBackend(t *testing.T, kind, location string) *procBackend {
	t.Helper()
	b := &procBackend{env: []string{"ISR_BACKEND=" + kind, "ISR_LOCATION=" + location}}
	switch kind {
	case "dynamo":
		client, _ := dynamoClient(t)
		b.tb = mustDynamoTable(t, client, location)
		b.add = func(ctx context.Context, pk, name string, delta int64) (int64, error) {
			return dynamoCounter(ctx, client, location, pk, name, delta)
		}
	case "redis":
		c := redisClient(t)
		tb, err := redisisr.NewTable(c, redisisr.WithPrefix(location))
		if err != nil {
			t.Fatal(err)
		}
		b.tb = tb
		b.add = func(ctx context.Context, pk, name string, delta int64) (int64, error) {
			return c.IncrBy(ctx, location+"test:{"+pk+"}:"+name, delta).Result()
		}
	case "file":
		tb, err := isr.NewFileTable(location)
		if err != nil {
			t.Fatal(err)
		}
		b.tb = tb
		b.add = func(ctx context.Context, pk, name string, delta int64) (int64, error) {
			return fileCounter(ctx, filepath.Join(location, "test-counter-"+isr.HashCacheKey(pk)+"-"+name), delta)
		}
	default:
		t.Fatalf("unknown backend %q", kind)
	}
	return b
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

// fileCounter adds delta to the number in path under an exclusive flock
// of path+".lock" (a lock of its own per call, so goroutines of one
// process exclude each other too) and returns the new value.
func fileCounter(ctx context.Context, path string, delta int64) (int64, error) {
	fl := flock.New(path + ".lock")
	if err := fl.Lock(); err != nil {
		return 0, err
	}
	defer fl.Close()
	var n int64
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return 0, err
	default:
		if n, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
			return 0, fmt.Errorf("counter %s: %w", path, err)
		}
	}
	n += delta
	if delta != 0 {
		if err := os.WriteFile(path, []byte(strconv.FormatInt(n, 10)), 0o600); err != nil {
			return 0, err
		}
	}
	return n, ctx.Err()
}
