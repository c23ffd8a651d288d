//go:build !unix

package storetest

import (
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

// StepCrashConfig configures RunStepCrash.
type StepCrashConfig struct {
	NewStore      func(namespace string) (storekit.Store, error)
	Namespace     string
	TakeoverAfter time.Duration
	Options       []idem.Option
	Env           []string
}

// RunStepCrash needs Unix signals; here it skips.
func RunStepCrash(t *testing.T, cfg StepCrashConfig) {
	t.Skip("storetest: RunStepCrash needs Unix signals")
}
