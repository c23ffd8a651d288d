// Command benchtable measures the DynamoDB store and a Guard over it against
// the raw DynamoDB requests they stand for, interleaved in one run against
// one table, and prints the per-call latency, requests per call and ratios.
//
//	go run ./stores/dynamostore/internal/benchtable -endpoint http://127.0.0.1:8765 -n 500
//	go run ./stores/dynamostore/internal/benchtable -table idem-bench -region eu-west-1   # real DynamoDB
//
// With -endpoint it uses static dummy credentials (DynamoDB Local);
// without, the default AWS credential chain. The table is created if
// missing (pk/sk strings, on-demand, TTL on ttl); items are written under a
// random prefix and, with real DynamoDB, expire through TTL.
package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/dynamostore"
)

func main() {
	endpoint := flag.String("endpoint", "", "DynamoDB endpoint URL (e.g. DynamoDB Local); empty = AWS")
	region := flag.String("region", "us-east-1", "AWS region")
	table := flag.String("table", "idem_bench", "table name")
	n := flag.Int("n", 200, "iterations per variant")
	flag.Parse()
	if err := run(*endpoint, *region, *table, *n); err != nil {
		log.Fatal(err)
	}
}

type variant struct {
	name string
	fn   func(ctx context.Context, i int) error
	d    time.Duration
	reqs int64
}

func run(endpoint, region, table string, n int) error {
	ctx := context.Background()
	var requests atomic.Int64
	count := func(o *dynamodb.Options) {
		o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
			return s.Finalize.Add(middleware.FinalizeMiddlewareFunc("countRequests",
				func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
					requests.Add(1)
					return next.HandleFinalize(ctx, in)
				}), middleware.After)
		})
	}
	var client *dynamodb.Client
	if endpoint != "" {
		client = dynamodb.New(dynamodb.Options{
			Region: region, BaseEndpoint: aws.String(endpoint),
			Credentials: credentials.NewStaticCredentialsProvider("local", "local", ""),
		}, count)
	} else {
		cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion(region))
		if err != nil {
			return err
		}
		client = dynamodb.NewFromConfig(cfg, count)
	}
	if err := dynamostore.CreateTable(ctx, client, table); err != nil {
		return err
	}
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	prefix := "bench" + hex.EncodeToString(b) + "#"
	store, err := dynamostore.New(client, table, dynamostore.WithKeyPrefix(prefix))
	if err != nil {
		return err
	}
	g, err := idem.New[int](store)
	if err != nil {
		return err
	}
	raw := rawClient{client: client, table: table}

	// Keys that replays hit.
	if err := raw.put(ctx, prefix+"raw-replay"); err != nil {
		return err
	}
	if err := raw.complete(ctx, prefix+"raw-replay"); err != nil {
		return err
	}
	if _, err := store.Claim(ctx, idem.ClaimRequest{Key: "idem:store-replay", Nonce: "n", LeaseTTL: time.Minute}); err != nil {
		return err
	}
	if err := store.Complete(ctx, "idem:store-replay", "n", idem.Completion{Status: idem.StatusCompleted, Result: []byte("42"), TTL: time.Hour}); err != nil {
		return err
	}
	fn := func(context.Context) (int, error) { return 42, nil }
	if _, err := g.Do(ctx, "guard-replay", fn); err != nil {
		return err
	}

	fresh := []*variant{
		{name: "raw PutItem+UpdateItem", fn: func(ctx context.Context, i int) error {
			pk := prefix + "raw-" + strconv.Itoa(i)
			if err := raw.put(ctx, pk); err != nil {
				return err
			}
			return raw.complete(ctx, pk)
		}},
		{name: "store Claim+Complete", fn: func(ctx context.Context, i int) error {
			k := "idem:store-" + strconv.Itoa(i)
			if _, err := store.Claim(ctx, idem.ClaimRequest{Key: k, Nonce: "n", LeaseTTL: time.Minute, TakeoverAfter: 30 * time.Second}); err != nil {
				return err
			}
			return store.Complete(ctx, k, "n", idem.Completion{Status: idem.StatusCompleted, Result: []byte("42"), TTL: time.Hour})
		}},
		{name: "guard Do (fresh)", fn: func(ctx context.Context, i int) error {
			_, err := g.Do(ctx, "guard-"+strconv.Itoa(i), fn)
			return err
		}},
	}
	replay := []*variant{
		{name: "raw failed PutItem", fn: func(ctx context.Context, _ int) error {
			err := raw.put(ctx, prefix+"raw-replay")
			var ccf *types.ConditionalCheckFailedException
			if errors.As(err, &ccf) {
				return nil
			}
			return fmt.Errorf("want a refused condition, got %v", err)
		}},
		{name: "store Claim (existing)", fn: func(ctx context.Context, _ int) error {
			_, err := store.Claim(ctx, idem.ClaimRequest{Key: "idem:store-replay", Nonce: "m", LeaseTTL: time.Minute, TakeoverAfter: 30 * time.Second})
			return err
		}},
		{name: "guard Do (replay)", fn: func(ctx context.Context, _ int) error {
			_, err := g.Do(ctx, "guard-replay", fn)
			return err
		}},
	}
	warm := min(n/10+1, 50)
	for _, set := range [][]*variant{fresh, replay} {
		for i := range warm { // not measured: warms the connections and the server
			for _, v := range set {
				if err := v.fn(ctx, -1-i); err != nil {
					return fmt.Errorf("%s: %w", v.name, err)
				}
			}
		}
		for i := range n {
			for _, v := range set {
				before := requests.Load()
				start := time.Now()
				if err := v.fn(ctx, i); err != nil {
					return fmt.Errorf("%s: %w", v.name, err)
				}
				v.d += time.Since(start)
				v.reqs += requests.Load() - before
			}
		}
		base := set[0].d
		for _, v := range set {
			fmt.Fprintf(os.Stdout, "%-26s %10v/call  %.2f requests/call  x%.3f of %s\n",
				v.name, (v.d / time.Duration(n)).Round(time.Microsecond), float64(v.reqs)/float64(n),
				float64(v.d)/float64(base), set[0].name)
		}
		fmt.Println()
	}
	return nil
}

type rawClient struct {
	client *dynamodb.Client
	table  string
}

func num(v int64) types.AttributeValue {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}
func str(v string) types.AttributeValue { return &types.AttributeValueMemberS{Value: v} }

// put is the claim a hand-written client would send: a conditional PutItem
// of an in-progress record.
func (r rawClient) put(ctx context.Context, pk string) error {
	now := time.Now().UnixMilli()
	_, err := r.client.PutItem(ctx, &dynamodb.PutItemInput{
		TableName: aws.String(r.table),
		Item: map[string]types.AttributeValue{
			"pk": str(pk), "sk": str("IDEM"), "record_version": num(1), "status": str("in_progress"),
			"nonce": str("n"), "payload_hash": str(""), "attempt": num(1), "started_at": num(now),
			"heartbeat_at": num(now), "expires_at": num(now + 60_000), "ttl": num(now/1000 + 3660),
		},
		ConditionExpression:                 aws.String("attribute_not_exists(pk)"),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	})
	return err
}

// complete is the nonce-conditioned UpdateItem that records the outcome.
func (r rawClient) complete(ctx context.Context, pk string) error {
	now := time.Now().UnixMilli()
	_, err := r.client.UpdateItem(ctx, &dynamodb.UpdateItemInput{
		TableName:                aws.String(r.table),
		Key:                      map[string]types.AttributeValue{"pk": str(pk), "sk": str("IDEM")},
		UpdateExpression:         aws.String("SET #st = :st, #res = :res, completed_at = :now, expires_at = :exp, #ttl = :ttl"),
		ConditionExpression:      aws.String("nonce = :n"),
		ExpressionAttributeNames: map[string]string{"#st": "status", "#res": "result", "#ttl": "ttl"},
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":st": str("completed"), ":res": &types.AttributeValueMemberB{Value: []byte("42")},
			":now": num(now), ":exp": num(now + 3_600_000), ":ttl": num(now/1000 + 7200), ":n": str("n"),
		},
	})
	return err
}
