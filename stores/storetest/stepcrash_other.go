//go:build !unix

package storetest

import (
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

// StepCrashConfig configures the StepCrash suite of the Harness.
type StepCrashConfig struct {
	NewStore      func(namespace string) (storekit.Store, error)
	Namespace     string
	TakeoverAfter time.Duration
	Options       []idem.Option
	Env           []string
}

// runStepCrash needs Unix signals; here it skips.
func runStepCrash(t *testing.T, cfg StepCrashConfig) {
	t.Skip("storetest: the step crash suite needs Unix signals")
}

// DeadOwnerConfig configures the DeadOwner suite of the Harness.
type DeadOwnerConfig struct {
	NewStore  func(namespace string) (storekit.Store, error)
	Namespace string
	Env       []string
	Presence  bool
}

// runDeadOwner needs Unix signals; here it skips.
func runDeadOwner(t *testing.T, cfg DeadOwnerConfig) {
	t.Skip("storetest: the dead owner suite needs Unix signals")
}
