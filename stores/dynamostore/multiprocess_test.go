package dynamostore_test

import (
	"testing"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/dynamostore"
	"github.com/idem-go/idem/stores/storetest"
)

// TestMultiProcessExactlyOnce: 4 processes x 16 goroutines, each with its
// own Guard, call the same 12 keys on DynamoDB Local: each key runs once
// and every caller gets its result.
func TestMultiProcessExactlyOnce(t *testing.T) {
	endpoint := testenv.DynamoDBEndpoint(t)
	storetest.RunProcesses(t, storetest.ProcessConfig{
		Namespace: "t" + randHex(6) + "#",
		NewStore: func(prefix string) (storekit.Store, error) {
			client := newClient(clientConfig{endpoint: endpoint})
			ensureTable(t, client)
			s := mustNew(t, client, testTable, dynamostore.WithKeyPrefix(prefix))
			return s, s.Validate()
		},
	})
}
