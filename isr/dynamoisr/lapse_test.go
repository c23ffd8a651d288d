package dynamoisr_test

import (
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/isr/internal/isrtesting"
)

// A lease holder whose refreshes fail stops rendering before another worker
// could acquire the lease, and does not publish: the holder's connection
// to DynamoDB is cut (a black hole, so its refreshes hang).
func TestLeaseLapseStopsRender(t *testing.T) {
	direct, _ := dynamoClient(t)
	table := freshTable(t, direct)
	endpoint := testenv.DynamoDBEndpoint(t)
	proxy := isrtesting.NewCutProxy(t, endpoint[len("http://"):])
	viaProxy := dynamodb.New(dynamodb.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String("http://" + proxy.Addr()),
		Credentials:      credentials.NewStaticCredentialsProvider("local", "local", ""),
		RetryMaxAttempts: 1,
	})
	isrtesting.RunLeaseLapse(t, isrtesting.LapseCase{Holder: mustDynamoTable(t, viaProxy, table), Other: mustDynamoTable(t, direct, table), Cut: proxy.Cut})
}
