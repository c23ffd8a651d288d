package dynamostore_test

import (
	"context"
	"sync"
	"testing"

	"github.com/idem-go/idem/storekit"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-go/idem/stores/storetest"
)

func TestConformance(t *testing.T) {
	var envs sync.Map // storekit.Store -> *env
	storetest.Run(t, func(t *testing.T) storekit.Store {
		e := newEnv(t)
		envs.Store(storekit.Store(e.store), e)
		return e.store
	}, storetest.WithCorrupter(func(t *testing.T, s storekit.Store, key string) {
		v, ok := envs.Load(s)
		if !ok {
			t.Fatal("corrupter: unknown store")
		}
		e := v.(*env)
		// A record whose attempt is no longer a number.
		_, err := e.client.UpdateItem(context.Background(), &dynamodb.UpdateItemInput{
			TableName: aws.String(testTable),
			Key: map[string]types.AttributeValue{
				"pk": &types.AttributeValueMemberS{Value: e.prefix + key},
				"sk": &types.AttributeValueMemberS{Value: "IDEM"},
			},
			UpdateExpression:          aws.String("SET attempt = :bad"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":bad": &types.AttributeValueMemberS{Value: "one"}},
		})
		if err != nil {
			t.Fatal(err)
		}
	}))
}
