// Command testfn is the Lambda function the package's tests run under the
// Runtime Interface Emulator (aws-lambda-rie). Its environment picks the
// adapter (TESTFN_MODE: event, sqs, rest, http), the DynamoDB Local table
// of its records (IDEM_DYNAMODB_ENDPOINT, TESTFN_TABLE) and a file each run
// of the guarded work appends a line to (TESTFN_LOG): the tests count runs
// and read their times there.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/idemlambda"
	"github.com/idem-go/idem/internal/dynamotest"
	"github.com/idem-go/idem/stores/dynamostore"
)

// Order is the event of mode "event".
type Order struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
	// SleepMs is how long the work takes; it ignores its context, as work
	// that hangs does, so that a long sleep runs into the deadline.
	SleepMs int `json:"sleep_ms"`
}

// Receipt is the result of mode "event".
type Receipt struct {
	OrderID string `json:"order_id"`
	Token   int64  `json:"token"`
	Pid     int    `json:"pid"`
	At      int64  `json:"at"`
}

// Run is a line of TESTFN_LOG.
type Run struct {
	Key      string `json:"key"`
	Start    int64  `json:"start"`    // Unix ms
	Deadline int64  `json:"deadline"` // Unix ms, the invocation's
	Token    int64  `json:"token"`
	Pid      int    `json:"pid"`
}

var logMu sync.Mutex

func record(ctx context.Context, key string) Run {
	d, _ := ctx.Deadline()
	tok, _ := idem.FencingToken(ctx)
	r := Run{Key: key, Start: time.Now().UnixMilli(), Deadline: d.UnixMilli(), Token: tok, Pid: os.Getpid()}
	b, _ := json.Marshal(r)
	logMu.Lock()
	defer logMu.Unlock()
	f, err := os.OpenFile(os.Getenv("TESTFN_LOG"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := f.Write(append(b, '\n')); err != nil {
		log.Fatal(err)
	}
	if err := f.Close(); err != nil {
		log.Fatal(err)
	}
	return r
}

func main() {
	store, err := dynamostore.New(dynamotest.NewLocalClient(os.Getenv("IDEM_DYNAMODB_ENDPOINT")), os.Getenv("TESTFN_TABLE"))
	if err != nil {
		log.Fatal(err)
	}
	var guard []idem.Option
	if os.Getenv("TESTFN_WAIT") == "1" {
		guard = append(guard, idem.OnDuplicate(idem.Wait))
	}
	switch mode := os.Getenv("TESTFN_MODE"); mode {
	case "event":
		h, err := idemlambda.Wrap(store, func(ctx context.Context, o Order) (Receipt, error) {
			r := record(ctx, o.OrderID)
			time.Sleep(time.Duration(o.SleepMs) * time.Millisecond)
			return Receipt{OrderID: o.OrderID, Token: r.Token, Pid: r.Pid, At: r.Start}, nil
		}, idemlambda.WithKeyPath("order_id"), idemlambda.WithPayloadPath("amount"), idemlambda.WithGuard(guard...))
		if err != nil {
			log.Fatal(err)
		}
		lambda.Start(h)
	case "sqs":
		h, err := idemlambda.SQS(store, func(ctx context.Context, m events.SQSMessage) error {
			var body struct {
				ID   string `json:"id"`
				Fail bool   `json:"fail"`
			}
			if err := json.Unmarshal([]byte(m.Body), &body); err != nil {
				return err
			}
			record(ctx, body.ID)
			if body.Fail {
				return errors.New("cannot process " + body.ID)
			}
			return nil
		}, idemlambda.WithKeyPath("powertools_json(body).id"), idemlambda.WithGuard(guard...))
		if err != nil {
			log.Fatal(err)
		}
		lambda.Start(h)
	case "rest":
		h, err := idemlambda.APIGateway(store, func(ctx context.Context, req events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
			r := record(ctx, req.Headers["Idempotency-Key"])
			if strings.Contains(req.Body, "sleep") {
				time.Sleep(time.Second)
			}
			return events.APIGatewayProxyResponse{
				StatusCode: 201,
				Headers:    map[string]string{"Content-Type": "application/json", "Location": fmt.Sprintf("/payments/%d", r.Start)},
				MultiValueHeaders: map[string][]string{
					"X-Ledger": {"a", "b"},
				},
				Body: fmt.Sprintf(`{"id":"pay_%d","pid":%d,"token":%d}`, r.Start, r.Pid, r.Token),
			}, nil
		}, idemlambda.WithGuard(guard...))
		if err != nil {
			log.Fatal(err)
		}
		lambda.Start(h)
	case "http":
		h, err := idemlambda.APIGatewayV2(store, func(ctx context.Context, req events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
			r := record(ctx, req.Headers["idempotency-key"])
			return events.APIGatewayV2HTTPResponse{
				StatusCode:      200,
				Headers:         map[string]string{"Content-Type": "application/octet-stream"},
				Body:            "AAEC/w==", // 00 01 02 ff
				IsBase64Encoded: true,
				Cookies:         []string{fmt.Sprintf("seen=%d", r.Start)},
			}, nil
		}, idemlambda.WithGuard(guard...), idemlambda.WithHTTP(idemhttp.WithReplaySetCookie()))
		if err != nil {
			log.Fatal(err)
		}
		lambda.Start(h)
	default:
		log.Fatalf("TESTFN_MODE %q: want event, sqs, rest or http", mode)
	}
}
