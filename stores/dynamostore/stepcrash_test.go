//go:build unix

package dynamostore_test

import (
	"testing"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/dynamostore"
	"github.com/idem-go/idem/stores/storetest"
)

// TestStepCrash runs the core's step crash harness on DynamoDB Local: an
// owner process SIGKILLed after step 1 and inside step 2, and one
// SIGSTOPped inside step 2, each taken over by another process.
func TestStepCrash(t *testing.T) {
	endpoint := testenv.DynamoDBEndpoint(t)
	storetest.RunStepCrash(t, storetest.StepCrashConfig{
		Namespace: "steps" + randHex(6) + "#",
		NewStore: func(prefix string) (storekit.Store, error) {
			client := newClient(clientConfig{endpoint: endpoint})
			ensureTable(t, client)
			return dynamostore.New(client, testTable, dynamostore.WithKeyPrefix(prefix))
		},
	})
}
