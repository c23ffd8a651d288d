package isr_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/body"
	"github.com/idem-go/idem/isr/dynamoisr"
	"github.com/idem-go/idem/isr/redisisr"
)

// The fixtures of the tests in this package, as the isr modules' own tests have them.

// requestCounter counts the requests a DynamoDB client sends, by operation,
// with SDK middleware (so retries of one call count once per attempt sent).
type requestCounter struct {
	total atomic.Int64
	ops   [16]atomic.Int64
}

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

var opIndex = map[string]int{"GetItem": 0, "PutItem": 1, "UpdateItem": 2, "DeleteItem": 3, "TransactWriteItems": 4}

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

func mustDynamoTable(t testing.TB, client dynamoisr.Client, table string) *dynamoisr.Table {
	t.Helper()
	tb, err := dynamoisr.NewTable(client, table)
	if err != nil {
		t.Fatalf("NewTable: %v", err)
	}
	return tb
}

func mustS3(t testing.TB, client dynamoisr.S3Client, bucket string, opts ...dynamoisr.S3BodyOption) *dynamoisr.S3Body {
	t.Helper()
	s, err := dynamoisr.NewS3Body(client, bucket, opts...)
	if err != nil {
		t.Fatalf("NewS3Body: %v", err)
	}
	return s
}

func mustCoordinator(t testing.TB, tb isr.Table, opts ...isr.Option) *isr.Coordinator {
	t.Helper()
	c, err := isr.NewCoordinator(tb, opts...)
	if err != nil {
		t.Fatalf("NewCoordinator: %v", err)
	}
	return c
}

func mustHandler(t testing.TB, c *isr.Coordinator, bodies body.Store, render isr.PageFunc, opts ...isr.HandlerOption) *isr.Handler {
	t.Helper()
	h, err := isr.NewHandler(c, bodies, render, opts...)
	if err != nil {
		t.Fatalf("NewHandler: %v", err)
	}
	return h
}

type response struct {
	code  int
	hdr   http.Header
	body  string
	cache string
}

func get(h http.Handler, path string, hdr ...string) response {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	res := w.Result()
	b, _ := io.ReadAll(res.Body)
	return response{code: res.StatusCode, hdr: res.Header, body: string(b), cache: res.Header.Get(isr.HeaderCache)}
}

type item = map[string]types.AttributeValue

func s(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

func n(v string) types.AttributeValue { return &types.AttributeValueMemberN{Value: v} }

func redisClient(t testing.TB) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(t)})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func redisCluster(t testing.TB) *redis.ClusterClient {
	t.Helper()
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.RedisClusterAddrs(t)})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// redisPrefix returns a fresh key prefix and deletes its keys when the
// test ends.
func redisPrefix(t testing.TB, c redis.UniversalClient) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	prefix := "isrtest:" + hex.EncodeToString(b[:]) + ":"
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		del := func(ctx context.Context, c redis.UniversalClient) error {
			iter := c.Scan(ctx, 0, prefix+"*", 20000).Iterator()
			for iter.Next(ctx) {
				c.Del(ctx, iter.Val())
			}
			return iter.Err()
		}
		if cc, ok := c.(*redis.ClusterClient); ok {
			_ = cc.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return del(ctx, n) })
			return
		}
		_ = del(ctx, c)
	})
	return prefix
}

func newRedisTable(t testing.TB, c redis.UniversalClient) *redisisr.Table {
	t.Helper()
	tb, err := redisisr.NewTable(c, redisisr.WithPrefix(redisPrefix(t, c)))
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

// pages is a PageFunc that counts its renders and can hold a render until
// the test lets it go.
type pages struct {
	renders atomic.Int64
	mu      sync.Mutex
	hold    chan struct{} // when non-nil, renders wait for it to close
	started chan struct{} // receives one value per render that starts
	err     error
	prefix  string
}

func (p *pages) render(ctx context.Context, tenant, key string) ([]byte, string, error) {
	n := p.renders.Add(1)
	p.mu.Lock()
	hold, err := p.hold, p.err
	p.mu.Unlock()
	p.started <- struct{}{}
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, "", ctx.Err()
		}
	}
	if err != nil {
		return nil, "", err
	}
	return []byte(fmt.Sprintf("%s%d %s", p.prefix, n, key)), "text/html; charset=utf-8", nil
}

func newPages() *pages { return &pages{started: make(chan struct{}, 1024), prefix: "v"} }

func mustPK(t testing.TB, key string) string {
	t.Helper()
	pk, err := isr.PK("", key)
	if err != nil {
		t.Fatal(err)
	}
	return pk
}

func newFileTable(t testing.TB, dir string) *isr.FileTable {
	t.Helper()
	tb, err := isr.NewFileTable(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tb
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
	// server's (isrtest.Base is in 2023), whose items it would delete at
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
