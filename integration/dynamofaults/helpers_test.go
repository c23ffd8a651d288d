package dynamofaults_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/dynamotest"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/dynamostore"
)

// testTable is shared by all tests of this package; every store gets its
// own key prefix.
const testTable = "idem_dynamofaults_test"

type clientConfig struct {
	endpoint string
	log      *dynamotest.RequestLog
	extra    []func(*dynamodb.Options)
}

func newClient(cc clientConfig) *dynamodb.Client {
	return dynamotest.NewLocalClient(cc.endpoint, func(o *dynamodb.Options) {
		if cc.log != nil {
			cc.log.Option(o)
		}
	}, func(o *dynamodb.Options) {
		for _, f := range cc.extra {
			f(o)
		}
	})
}

var (
	tableOnce sync.Once
	tableErr  error
)

// ensureTable creates the shared test table once per process.
func ensureTable(t testing.TB, c *dynamodb.Client) {
	t.Helper()
	tableOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		tableErr = dynamostore.CreateTable(ctx, c, testTable)
	})
	if tableErr != nil {
		t.Fatalf("create table: %v", tableErr)
	}
}

func randHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// storageKey returns a key shaped like the ones a Guard passes.
func storageKey() string { return "idem:" + randHex(32) }

type env struct {
	endpoint string
	client   *dynamodb.Client
	log      *dynamotest.RequestLog
	prefix   string
	store    *dynamostore.Store
}

// newEnv returns a store on the shared table with a fresh key prefix, over
// a client whose requests are logged.
func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{endpoint: testenv.DynamoDBEndpoint(t), log: &dynamotest.RequestLog{}, prefix: "t" + randHex(6) + "#"}
	e.client = newClient(clientConfig{endpoint: e.endpoint, log: e.log})
	ensureTable(t, e.client)
	e.store = mustNew(t, e.client, testTable, dynamostore.WithKeyPrefix(e.prefix))
	if err := e.store.Validate(); err != nil {
		t.Fatal(err)
	}
	e.log.Take()
	return e
}

// mustNew returns a store, failing the test on an option error.
func mustNew(t testing.TB, c dynamostore.Client, table string, opts ...dynamostore.Option) *dynamostore.Store {
	t.Helper()
	s, err := dynamostore.New(c, table, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newGuard[T any](t *testing.T, s storekit.Store, opts ...idem.Option) *idem.Guard[T] {
	t.Helper()
	g, err := idem.New[T](s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func claimReq(key, nonce string) storekit.ClaimRequest {
	return storekit.ClaimRequest{Key: key, Nonce: nonce, PayloadHash: "ph", LeaseTTL: time.Minute, TakeoverAfter: 10 * time.Second}
}

func mustClaim(t *testing.T, s storekit.Store, req storekit.ClaimRequest, want storekit.ClaimOutcome) *storekit.Record {
	t.Helper()
	res, err := s.Claim(context.Background(), req)
	if err != nil {
		t.Fatalf("claim %s: %v", req.Nonce, err)
	}
	if res.Outcome != want {
		t.Fatalf("claim %s: outcome %v, want %v (record %+v)", req.Nonce, res.Outcome, want, res.Record)
	}
	return res.Record
}

func wantOps(t *testing.T, e *env, want ...string) {
	t.Helper()
	if got := e.log.Take(); !slices.Equal(got, want) {
		t.Fatalf("requests %v, want %v", got, want)
	}
}
