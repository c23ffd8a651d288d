package redisstore_test

import (
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/idem-go/idem/stores/storetest"
)

// TestStepCrash runs the step crash cases with real processes on
// standalone Redis: an owner SIGKILLed after a step or inside one, and one
// SIGSTOPped inside a step, each taken over by another process.
func TestStepCrash(t *testing.T) {
	storetest.RunStepCrash(t, storetest.StepCrashConfig{
		NewStore: func(prefix string) (idem.Store, error) {
			return redisstore.New(standalone(t), redisstore.WithPrefix(prefix))
		},
	})
}

// TestStepCrashCluster runs the same cases on the Redis Cluster.
func TestStepCrashCluster(t *testing.T) {
	storetest.RunStepCrash(t, storetest.StepCrashConfig{
		NewStore: func(prefix string) (idem.Store, error) {
			return redisstore.New(cluster(t), redisstore.WithPrefix(prefix))
		},
	})
}
