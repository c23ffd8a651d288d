package dynamostore_test

import (
	"context"
	"sync"
	"testing"

	"github.com/idem-go/idem/storekit"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/dynamostore"
	"github.com/idem-go/idem/stores/storetest"
)

// TestConformance runs storetest's suites on DynamoDB Local, each store
// under a fresh key prefix: the store's operations, its listing, secret
// rotation, processes sharing the table (4 processes x 16 goroutines on 12
// keys; in the middle of a rotation 4 x 8 on 8 keys, DynamoDB Local being
// slow enough that more would take most of a minute), owners killed or
// stopped in the middle of a call's steps, and a process restarted with
// its instance ID taking its earlier incarnation's claim at once.
func TestConformance(t *testing.T) {
	endpoint := testenv.DynamoDBEndpoint(t)
	var envs sync.Map // storekit.Store -> *env
	newProcessStore := func(prefix string) (storekit.Store, error) {
		client := newClient(clientConfig{endpoint: endpoint})
		ensureTable(t, client)
		s := mustNew(t, client, testTable, dynamostore.WithKeyPrefix(prefix))
		return s, s.Validate()
	}
	storetest.Run(t, storetest.Harness{
		NewStore: func(t *testing.T) storekit.Store {
			e := newEnv(t)
			envs.Store(storekit.Store(e.store), e)
			return e.store
		},
		Corrupt: func(t *testing.T, s storekit.Store, key string) {
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
		},
		List:     func(t *testing.T) storekit.Store { return newEnv(t).store },
		Rotation: true,
		Processes: &storetest.ProcessConfig{
			Namespace: "t" + randHex(6) + "#",
			NewStore:  newProcessStore,
		},
		RotationProcesses: &storetest.ProcessConfig{
			Namespace:  "t" + randHex(6) + "#",
			Goroutines: 8,
			Keys:       8,
			NewStore:   newProcessStore,
		},
		StepCrash: &storetest.StepCrashConfig{
			Namespace: "steps" + randHex(6) + "#",
			NewStore: func(prefix string) (storekit.Store, error) {
				client := newClient(clientConfig{endpoint: endpoint})
				ensureTable(t, client)
				return dynamostore.New(client, testTable, dynamostore.WithKeyPrefix(prefix))
			},
		},
		// DynamoDB cannot tell a dead process (no Presence): only the
		// Restarted case runs, a restart with the same WithInstanceID.
		DeadOwner: &storetest.DeadOwnerConfig{
			Namespace: "dead" + randHex(6) + "#",
			NewStore: func(prefix string) (storekit.Store, error) {
				client := newClient(clientConfig{endpoint: endpoint})
				ensureTable(t, client)
				return dynamostore.New(client, testTable, dynamostore.WithKeyPrefix(prefix))
			},
		},
	})
}
