package idemlambda_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/idem-go/idem/idemlambda"
	"github.com/idem-go/idem/internal/dynamotest"
	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/dynamostore"
)

// countingStore counts the store calls (round trips) a Guard makes.
type countingStore struct {
	storekit.Store
	n atomic.Int64
}

func (s *countingStore) Claim(ctx context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, error) {
	s.n.Add(1)
	return s.Store.Claim(ctx, req)
}

func (s *countingStore) Heartbeat(ctx context.Context, key, nonce string, lease time.Duration) error {
	s.n.Add(1)
	return s.Store.Heartbeat(ctx, key, nonce, lease)
}

func (s *countingStore) Complete(ctx context.Context, key, nonce string, c storekit.Completion) error {
	s.n.Add(1)
	return s.Store.Complete(ctx, key, nonce, c)
}

func (s *countingStore) Release(ctx context.Context, key, nonce string) error {
	s.n.Add(1)
	return s.Store.Release(ctx, key, nonce)
}

func (s *countingStore) Get(ctx context.Context, key string) (*storekit.Record, error) {
	s.n.Add(1)
	return s.Store.Get(ctx, key)
}

// benchStores are the stores the benchmarks run on: memstore, and DynamoDB
// Local when IDEM_DYNAMODB_ENDPOINT names one.
func benchStores(b *testing.B) map[string]func() storekit.Store {
	stores := map[string]func() storekit.Store{"memstore": func() storekit.Store { return newStore(b) }}
	if ep := os.Getenv("IDEM_DYNAMODB_ENDPOINT"); ep != "" {
		stores["dynamodb-local"] = func() storekit.Store {
			client := dynamotest.NewLocalClient(ep)
			table := fmt.Sprintf("idemlambda_bench_%d", time.Now().UnixNano())
			if err := dynamostore.CreateTable(context.Background(), client, table); err != nil {
				b.Fatal(err)
			}
			st, err := dynamostore.New(client, table)
			if err != nil {
				b.Fatal(err)
			}
			return st
		}
	}
	return stores
}

type benchOrder struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

func benchHandler(ctx context.Context, o benchOrder) (Receipt, error) {
	return Receipt{ChargeID: "ch_" + o.OrderID}, nil
}

// BenchmarkWrap: a guarded invocation (a fresh key: the first one; a key
// done before: a replay) against the bare handler, with an invocation
// deadline as Lambda sets it. round-trips/op are the store calls per
// invocation; ns-over-bare/op what the guard adds to the handler.
func BenchmarkWrap(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	bare := func(n int) time.Duration {
		start := time.Now()
		for i := range n {
			benchHandler(ctx, benchOrder{OrderID: strconv.Itoa(i), Amount: 1})
		}
		return time.Since(start)
	}
	for name, mk := range benchStores(b) {
		for _, mode := range []string{"first", "replay"} {
			b.Run(name+"/"+mode, func(b *testing.B) {
				cs := &countingStore{Store: mk()}
				h, err := idemlambda.Wrap(cs, benchHandler, idemlambda.WithKeyPath("order_id"), idemlambda.WithPayloadPath("amount"))
				if err != nil {
					b.Fatal(err)
				}
				if mode == "replay" {
					if _, err := h(ctx, benchOrder{OrderID: "done", Amount: 1}); err != nil {
						b.Fatal(err)
					}
				}
				cs.n.Store(0)
				b.ReportAllocs()
				b.ResetTimer()
				start := time.Now()
				for i := 0; i < b.N; i++ {
					key := "done"
					if mode == "first" {
						key = strconv.Itoa(i)
					}
					if _, err := h(ctx, benchOrder{OrderID: key, Amount: 1}); err != nil {
						b.Fatal(err)
					}
				}
				el := time.Since(start)
				b.StopTimer()
				b.ReportMetric(float64(cs.n.Load())/float64(b.N), "round-trips/op")
				b.ReportMetric(float64((el-bare(b.N)).Nanoseconds())/float64(b.N), "ns-over-bare/op")
			})
		}
	}
}

// BenchmarkSQS: a batch of ten fresh records, and its redelivery (all
// skipped), per op.
func BenchmarkSQS(b *testing.B) {
	for name, mk := range benchStores(b) {
		b.Run(name, func(b *testing.B) {
			cs := &countingStore{Store: mk()}
			h, err := idemlambda.SQS(cs, func(context.Context, events.SQSMessage) error { return nil })
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				var ev events.SQSEvent
				for j := range 10 {
					ev.Records = append(ev.Records, events.SQSMessage{MessageId: fmt.Sprintf("%d-%d", i, j), Body: "hello"})
				}
				for range 2 {
					if resp, _ := h(ctx, ev); len(resp.BatchItemFailures) > 0 {
						b.Fatal(resp)
					}
				}
			}
			b.ReportMetric(float64(cs.n.Load())/float64(b.N), "round-trips/op")
		})
	}
}

// BenchmarkAPIGateway: a first request and its replay, per op.
func BenchmarkAPIGateway(b *testing.B) {
	for name, mk := range benchStores(b) {
		b.Run(name, func(b *testing.B) {
			cs := &countingStore{Store: mk()}
			h, err := idemlambda.APIGateway(cs, func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
				return events.APIGatewayProxyResponse{StatusCode: 201, Headers: map[string]string{"Content-Type": "application/json"}, Body: `{"id":"pay_1"}`}, nil
			})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				req := events.APIGatewayProxyRequest{HTTPMethod: "POST", Path: "/payments", Body: `{"amount":1}`,
					Headers: map[string]string{"Idempotency-Key": strconv.Itoa(i)}}
				for range 2 {
					if resp, err := h(ctx, req); err != nil || resp.StatusCode != 201 {
						b.Fatal(resp, err)
					}
				}
			}
			b.ReportMetric(float64(cs.n.Load())/float64(b.N), "round-trips/op")
		})
	}
}
