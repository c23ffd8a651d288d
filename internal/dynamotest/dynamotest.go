// Package dynamotest holds what this repository's tests of dynamostore and
// of code built on it need around DynamoDB Local: a client for a local
// endpoint, and a log of the requests the SDK puts on the wire (retries
// included), for tests that count round trips or cut connections. It is a
// module of its own that requires the AWS SDK only, so the modules whose
// tests use it pull in nothing else; being internal, it is no API.
package dynamotest

import (
	"context"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/smithy-go/middleware"
)

// NewLocalClient returns a client of the DynamoDB Local server at endpoint
// (region us-east-1, static credentials that DynamoDB Local accepts), with
// opts applied after those settings.
func NewLocalClient(endpoint string, opts ...func(*dynamodb.Options)) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
	}, opts...)
}

// RequestLog records the operation name of every HTTP request a client
// sends, each retry included. Its zero value is ready to use; Option
// attaches it to a client.
type RequestLog struct {
	mu  sync.Mutex
	ops []string
}

// Option is a client option that adds the log as a Finalize-step
// middleware after the retry middleware, so that it sees every attempt
// that goes on the wire.
func (l *RequestLog) Option(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(stack *middleware.Stack) error {
		return stack.Finalize.Add(middleware.FinalizeMiddlewareFunc("idemRequestLog",
			func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
				l.mu.Lock()
				l.ops = append(l.ops, awsmiddleware.GetOperationName(ctx))
				l.mu.Unlock()
				return next.HandleFinalize(ctx, in)
			}), middleware.After)
	})
}

// Take returns the operations logged since the last Take, in the order
// they were sent, and clears the log.
func (l *RequestLog) Take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	ops := l.ops
	l.ops = nil
	return ops
}
