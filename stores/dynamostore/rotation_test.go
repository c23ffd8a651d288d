package dynamostore_test

import (
	"testing"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/dynamostore"
	"github.com/idem-go/idem/stores/storetest"
)

// TestRotation runs storetest's secret rotation checks (every case of a
// record found under a previous secret, a tie mid-deploy, goroutines as
// each deploy runs them) on DynamoDB Local, each store under a fresh key
// prefix.
func TestRotation(t *testing.T) {
	storetest.RunRotation(t, func(t *testing.T) storekit.Store { return newEnv(t).store })
}

// TestRotationProcesses: 4 processes, two configured WithSecret(A, B) and
// two WithSecret(B, A), as while a rotation's second deploy rolls, x 8
// goroutines with a Guard each, call the same 8 keys on DynamoDB Local
// (slow enough that more would take most of a minute):
// each key runs once and every caller gets its result.
func TestRotationProcesses(t *testing.T) {
	endpoint := testenv.DynamoDBEndpoint(t)
	storetest.RunRotationProcesses(t, storetest.ProcessConfig{
		Namespace:  "t" + randHex(6) + "#",
		Goroutines: 8,
		Keys:       8,
		NewStore: func(prefix string) (storekit.Store, error) {
			client := newClient(clientConfig{endpoint: endpoint})
			ensureTable(t, client)
			s := mustNew(t, client, testTable, dynamostore.WithKeyPrefix(prefix))
			return s, s.Validate()
		},
	})
}
