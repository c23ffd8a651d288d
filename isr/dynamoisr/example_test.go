package dynamoisr_test

import (
	"context"
	"fmt"
	"net/http"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/dynamoisr"
)

// A server on a DynamoDB table with its bodies in S3: the clients come
// from the AWS SDK (config.LoadDefaultConfig in a real server); nothing
// here contacts AWS until the handler serves a request.
func Example() {
	table, err := dynamoisr.NewTable(dynamodb.New(dynamodb.Options{Region: "eu-west-1"}), "isr-pages")
	if err != nil {
		panic(err)
	}
	bodies, err := dynamoisr.NewS3Body(s3.New(s3.Options{Region: "eu-west-1"}), "pages-bucket", dynamoisr.WithS3Prefix("pages/"))
	if err != nil {
		panic(err)
	}
	coord, err := isr.NewCoordinator(table)
	if err != nil {
		panic(err)
	}
	h, err := isr.NewHandler(coord, bodies, func(ctx context.Context, tenant, path string) ([]byte, string, error) {
		return []byte("<h1>" + path + "</h1>"), "text/html; charset=utf-8", nil
	})
	if err != nil {
		panic(err)
	}
	var _ http.Handler = h
	fmt.Println(table.Name(), bodies.ObjectKey("index.html"))
	// Output: isr-pages pages/index.html
}
