package filestore_test

import (
	"path/filepath"
	"testing"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/stores/filestore"
	"github.com/idem-go/idem/stores/storetest"
)

// TestStepCrash runs the step crash cases with real processes on one
// directory: an owner SIGKILLed after a step or inside one, and one
// SIGSTOPped inside a step, each taken over by another process.
func TestStepCrash(t *testing.T) {
	storetest.RunStepCrash(t, storetest.StepCrashConfig{
		Namespace: filepath.Join(t.TempDir(), "store"),
		NewStore:  func(dir string) (storekit.Store, error) { return filestore.New(dir) },
	})
}
