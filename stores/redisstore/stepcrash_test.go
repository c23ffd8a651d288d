package redisstore_test

import (
	"testing"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/stores/redisstore"
	"github.com/idem-go/idem/stores/storetest"
)

// stepCrash runs the step crash cases with real processes on a
// deployment of kind: an owner SIGKILLed after a step or inside
// one, and one SIGSTOPped inside a step, each taken over by another
// process (the paused owner's writes, once it runs again, refused).
func stepCrash(t *testing.T, kind string) {
	storetest.RunStepCrash(t, storetest.StepCrashConfig{
		NewStore: func(prefix string) (storekit.Store, error) {
			return redisstore.New(dial(t, kind), redisstore.WithPrefix(prefix))
		},
	})
}

// TestStepCrash runs the step crash cases on standalone Redis.
func TestStepCrash(t *testing.T) {
	stepCrash(t, "standalone")
}

// TestStepCrashCluster runs them on the Redis Cluster.
func TestStepCrashCluster(t *testing.T) {
	stepCrash(t, "cluster")
}

// TestStepCrashValkey runs them on Valkey 8.1, where a fresh claim is
// completed with SET ... IFEQ: the paused owner's IFEQ finds the claim
// taken over and writes nothing.
func TestStepCrashValkey(t *testing.T) {
	stepCrash(t, "valkey")
}

// TestStepCrashValkeyCluster runs them on the Valkey 8.1 Cluster.
func TestStepCrashValkeyCluster(t *testing.T) {
	stepCrash(t, "valkey-cluster")
}
