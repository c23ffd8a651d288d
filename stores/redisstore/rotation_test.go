package redisstore_test

import (
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/idem-go/idem/stores/storetest"
)

// TestRotation runs storetest's secret rotation checks (every case of a
// record found under a previous secret, a tie mid-deploy, goroutines as
// each deploy runs them) on standalone Redis and the Cluster.
func TestRotation(t *testing.T) {
	both(t, func(t *testing.T, c backend) {
		storetest.RunRotation(t, func(t *testing.T) storekit.Store { return newStore(t, c) })
	})
}

// TestRotationProcesses: 4 OS processes, two configured
// WithSecret(A, B) and two WithSecret(B, A), as while a rotation's second
// deploy rolls, x 16 goroutines with a Guard each, call the same 24 keys
// at once, on standalone Redis and the Cluster: each key runs once and
// every caller gets its result.
func TestRotationProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	for _, kind := range []string{"standalone", "cluster"} {
		t.Run(kind, func(t *testing.T) { rotationProcesses(t, kind) })
	}
}

// rotationProcesses runs one kind's processes; RunRotationProcesses re-runs
// this test in the children, where it does the work and exits.
func rotationProcesses(t *testing.T, kind string) {
	storetest.RunRotationProcesses(t, storetest.ProcessConfig{
		Keys:    24,
		Options: []idem.Option{idem.WithHeartbeat(500 * time.Millisecond), idem.WithTakeoverAfter(5 * time.Second)},
		NewStore: func(prefix string) (storekit.Store, error) {
			return redisstore.New(dial(t, kind), redisstore.WithPrefix(prefix))
		},
	})
}
