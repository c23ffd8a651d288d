package idemlambda_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-lambda-go/events"
	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemlambda"
	"github.com/idem-go/idem/stores/memstore"
)

type Order struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
}

type Receipt struct {
	ChargeID string `json:"charge_id"`
}

// A function's handler guarded by the order ID, with the amount as its
// payload. In a function, the store is dynamostore's, and the handler goes
// to lambda.Start.
func Example() {
	charges := 0
	chargeOrder := func(ctx context.Context, o Order) (Receipt, error) {
		charges++
		return Receipt{ChargeID: fmt.Sprintf("ch_%d", charges)}, nil
	}
	store, _ := memstore.New() // no options: cannot fail
	handler, err := idemlambda.Wrap(store, chargeOrder,
		idemlambda.WithKeyPath("order_id"),
		idemlambda.WithPayloadPath("amount"),
	)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	r1, err1 := handler(ctx, Order{OrderID: "ord-1", Amount: 100})
	r2, err2 := handler(ctx, Order{OrderID: "ord-1", Amount: 100}) // Lambda's retry
	_, err3 := handler(ctx, Order{OrderID: "ord-1", Amount: 999})
	_, err4 := handler(ctx, Order{Amount: 5})
	fmt.Println(r1.ChargeID, err1)
	fmt.Println(r2.ChargeID, err2)
	fmt.Println(errors.Is(err3, idem.ErrPayloadMismatch), errors.Is(err4, idemlambda.ErrNoKey))
	fmt.Println("charges:", charges)
	// Output:
	// ch_1 <nil>
	// ch_1 <nil>
	// true true
	// charges: 1
}

// An SQS batch: each record guarded by its message ID; the record that
// fails is the only one redelivered, and the redelivery skips the others.
func ExampleSQS() {
	sent := map[string]int{}
	sendEmail := func(ctx context.Context, m events.SQSMessage) error {
		if m.Body == "bounce@example.com" {
			return errors.New("mailbox unavailable")
		}
		sent[m.Body]++
		return nil
	}
	store, _ := memstore.New()
	handler, err := idemlambda.SQS(store, sendEmail)
	if err != nil {
		panic(err)
	}
	batch := events.SQSEvent{Records: []events.SQSMessage{
		{MessageId: "m1", Body: "ann@example.com"},
		{MessageId: "m2", Body: "bounce@example.com"},
		{MessageId: "m3", Body: "bob@example.com"},
	}}
	for range 2 { // the second time, as SQS redelivers the batch
		resp, _ := handler(context.Background(), batch)
		fmt.Println(resp.BatchItemFailures)
	}
	fmt.Println(sent)
	// Output:
	// [{m2}]
	// [{m2}]
	// map[ann@example.com:1 bob@example.com:1]
}

// A REST API behind API Gateway: a retry with the same Idempotency-Key gets
// the recorded response; another body under the key a 422.
func ExampleAPIGateway() {
	payments := 0
	createPayment := func(ctx context.Context, r events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		payments++
		return events.APIGatewayProxyResponse{
			StatusCode: 201,
			Headers:    map[string]string{"Content-Type": "application/json"},
			Body:       fmt.Sprintf(`{"id":"pay_%d"}`, payments),
		}, nil
	}
	store, _ := memstore.New()
	handler, err := idemlambda.APIGateway(store, createPayment)
	if err != nil {
		panic(err)
	}
	send := func(body string) {
		resp, _ := handler(context.Background(), events.APIGatewayProxyRequest{
			HTTPMethod: "POST", Path: "/payments", Body: body,
			Headers: map[string]string{"Idempotency-Key": "8e03978e"},
		})
		fmt.Println(resp.StatusCode, resp.Headers["Idempotent-Replayed"], resp.Body)
	}
	send(`{"amount":100}`)
	send(`{"amount":100}`)
	send(`{"amount":200}`)
	fmt.Println("payments:", payments)
	// Output:
	// 201  {"id":"pay_1"}
	// 201 true {"id":"pay_1"}
	// 422  {"type":"https://pkg.go.dev/github.com/idem-go/idem/idemhttp#ProblemKeyReused","title":"Idempotency key reused","status":422,"detail":"This idempotency key was already used with a different request."}
	//
	// payments: 1
}
