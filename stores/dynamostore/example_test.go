package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/dynamostore"
)

type Invoice struct {
	ID     string
	Amount int64
}

func Example() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	client := dynamodb.NewFromConfig(cfg)

	// Once, at deployment: pk/sk strings, on-demand, TTL on "ttl".
	if err := dynamostore.CreateTable(ctx, client, "app"); err != nil {
		log.Fatal(err)
	}

	// Records live next to other items of the single table, under sk = "IDEM".
	store, err := dynamostore.New(client, "app")
	if err != nil {
		log.Fatal(err)
	}
	g, err := idem.New[Invoice](store, idem.WithNamespace("tenant-1", "invoices.create"))
	if err != nil {
		log.Fatal(err)
	}
	inv, err := g.Do(ctx, "order-1234", func(ctx context.Context) (Invoice, error) {
		token, _ := idem.FencingToken(ctx) // pass downstream: it never goes backwards
		return Invoice{ID: fmt.Sprint("inv-", token), Amount: 4200}, nil
	}, idem.Payload(map[string]any{"amount": 4200}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(inv.ID)
}

type Order struct {
	ID    string
	Total int64
}

// ExampleDoTx writes an order row and decrements the stock in the same
// transaction as the call's outcome: a crash before the commit leaves
// neither, a retry after it replays the order without writing again. The
// stock's own condition (enough left) failing cancels everything with a
// *dynamostore.TxCanceledError naming that item, and the claim is released.
func ExampleDoTx() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	client := dynamodb.NewFromConfig(cfg)
	store, err := dynamostore.New(client, "app")
	if err != nil {
		log.Fatal(err)
	}
	g, err := idem.New[Order](store)
	if err != nil {
		log.Fatal(err)
	}
	order, err := dynamostore.DoTx(ctx, g, "checkout-5678", func(ctx context.Context, tx *dynamostore.Tx) (Order, error) {
		o := Order{ID: "ord-5678", Total: 4200}
		if err := tx.Put(types.Put{
			TableName: aws.String("orders"),
			Item: map[string]types.AttributeValue{
				"pk": &types.AttributeValueMemberS{Value: o.ID},
				"sk": &types.AttributeValueMemberS{Value: "ORDER"},
			},
			ConditionExpression: aws.String("attribute_not_exists(pk)"),
		}); err != nil {
			return Order{}, err
		}
		if err := tx.Update(types.Update{
			TableName:                 aws.String("stock"),
			Key:                       map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "sku-1"}, "sk": &types.AttributeValueMemberS{Value: "STOCK"}},
			UpdateExpression:          aws.String("SET qty = qty - :one"),
			ConditionExpression:       aws.String("qty >= :one"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":one": &types.AttributeValueMemberN{Value: "1"}},
		}); err != nil {
			return Order{}, err
		}
		return o, nil
	})
	var canceled *dynamostore.TxCanceledError
	switch {
	case errors.As(err, &canceled):
		fmt.Printf("refused by item %d on %s: %s\n", canceled.Index, canceled.Table, canceled.Code)
	case err != nil:
		log.Fatal(err)
	default:
		fmt.Println(order.ID)
	}
}

// ExampleStepTx is a checkout: the charge is a Step (an external call), and
// the order item is written with the step's record in one
// TransactWriteItems, so it is written exactly once, and no transaction is
// held while the provider answers.
func ExampleStepTx() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	store, err := dynamostore.New(dynamodb.NewFromConfig(cfg), "app")
	if err != nil {
		log.Fatal(err)
	}
	g, err := idem.New[Order](store)
	if err != nil {
		log.Fatal(err)
	}
	order, err := g.Do(ctx, "checkout-5678", func(ctx context.Context) (Order, error) {
		if _, err := idem.Step(ctx, "charge", func(ctx context.Context) (string, error) {
			return "ch_1", nil // the provider's call, with idem.StepKey(ctx) as its Idempotency-Key
		}); err != nil {
			return Order{}, err
		}
		return dynamostore.StepTx(ctx, "order", func(ctx context.Context, tx *dynamostore.Tx) (Order, error) {
			o := Order{ID: "ord-5678", Total: 4200}
			return o, tx.Put(types.Put{
				TableName: aws.String("orders"),
				Item: map[string]types.AttributeValue{
					"pk": &types.AttributeValueMemberS{Value: o.ID},
					"sk": &types.AttributeValueMemberS{Value: "ORDER"},
				},
			})
		})
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(order.ID)
}

// ExampleNew shares one table between the records of two services, on
// DynamoDB Local: each service's storage keys behind a prefix of its own,
// and a day of retention past expiry before DynamoDB's TTL may delete an
// item.
func ExampleNew() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	client := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
		o.BaseEndpoint = aws.String("http://localhost:8000")
	})
	billing, err := dynamostore.New(client, "app",
		dynamostore.WithKeyPrefix("billing#"),
		dynamostore.WithRetention(24*time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	shipping, err := dynamostore.New(client, "app", dynamostore.WithKeyPrefix("shipping#"))
	if err != nil {
		log.Fatal(err)
	}
	_, _ = billing, shipping
}
