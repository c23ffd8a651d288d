package dynamostore_test

import (
	"context"
	"fmt"
	"log"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

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
