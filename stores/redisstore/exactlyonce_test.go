package redisstore_test

import (
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/idem-go/idem/stores/storetest"
)

// TestExactlyOnceProcesses runs 4 OS processes (this test binary, re-run)
// x 16 goroutines, each with its own client, store and Guard, all calling
// Do on the same 24 keys, on standalone Redis, the Cluster and Valkey (standalone and Cluster): each key
// runs once and every caller gets that run's result.
func TestExactlyOnceProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	bothKinds(t, func(t *testing.T, kind string) {
		storetest.RunProcesses(t, storetest.ProcessConfig{
			Keys:    24,
			Options: []idem.Option{idem.WithHeartbeat(500 * time.Millisecond), idem.WithTakeoverAfter(5 * time.Second)},
			NewStore: func(prefix string) (storekit.Store, error) {
				return redisstore.New(dial(t, kind), redisstore.WithPrefix(prefix))
			},
		})
	})
}
