// Command lambda-orders is an AWS Lambda function that creates an order
// once per order ID, however often Lambda retries the invocation or a
// client sends it again: idemlambda guards the handler, with its records
// in a DynamoDB table (stores/dynamostore).
//
// Build it for the provided.al2023 runtime, as a binary named bootstrap:
//
//	GOOS=linux GOARCH=arm64 go build -tags lambda.norpc -o bootstrap ./examples/lambda-orders
//
// and give it IDEM_TABLE, a table made by dynamostore.CreateTable. An
// invocation whose work outlives the function's timeout leaves no claim
// behind: the retry runs within a second of the deadline.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"sync/atomic"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idem-go/idem/idemlambda"
	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/dynamostore"
)

// Order is the event: a client's order, keyed by its ID.
type Order struct {
	OrderID  string `json:"order_id"`
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"`
}

// Receipt is what the function returns, and what a repeat gets back.
type Receipt struct {
	OrderID string `json:"order_id"`
	Charge  string `json:"charge"`
}

// charges counts the charges made, standing in for a payment provider.
var charges atomic.Int64

// createOrder charges the order; idemlambda makes it run once per order ID.
func createOrder(_ context.Context, o Order) (Receipt, error) {
	n := charges.Add(1)
	return Receipt{OrderID: o.OrderID, Charge: fmt.Sprintf("ch_%d", n)}, nil
}

// newHandler guards createOrder on store: the key is the order's ID, and a
// repeat with another amount or currency is refused.
func newHandler(store storekit.Store) (func(context.Context, Order) (Receipt, error), error) {
	return idemlambda.Wrap(store, createOrder,
		idemlambda.WithKeyPath("order_id"),
		idemlambda.WithPayloadPath("[amount, currency]"),
	)
}

func main() {
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		log.Fatal(err)
	}
	store, err := dynamostore.New(dynamodb.NewFromConfig(cfg), os.Getenv("IDEM_TABLE"))
	if err != nil {
		log.Fatal(err)
	}
	handler, err := newHandler(store)
	if err != nil {
		log.Fatal(err)
	}
	lambda.Start(handler)
}
