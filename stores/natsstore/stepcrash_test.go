package natsstore_test

import (
	"context"
	"testing"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/natsstore"
	"github.com/idem-go/idem/stores/storetest"
)

// TestStepCrash runs the step crash cases with real processes on one
// bucket: an owner SIGKILLed after a step or inside one, and one SIGSTOPped
// inside a step, each taken over by another process.
func TestStepCrash(t *testing.T) {
	url := testenv.NATSURL(t)
	storetest.RunStepCrash(t, storetest.StepCrashConfig{
		Namespace: randName("idemsteps_"),
		NewStore: func(bucket string) (storekit.Store, error) {
			_, js := connect(t, url)
			kv, err := natsstore.CreateBucket(context.Background(), js, bucket)
			if err != nil {
				return nil, err
			}
			return natsstore.New(kv)
		},
	})
}
