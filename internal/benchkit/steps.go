package benchkit

import (
	"context"
	"errors"
	"testing"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

// StepFresh measures Do of a fresh key whose fn runs one recorded step:
// claim, steps epoch, step claim, step complete, complete (5 store
// operations: a step that runs costs 2, the first step of an attempt 1
// more for the epoch).
func StepFresh(b *testing.B, s storekit.Store) (ops, beats int) {
	return fresh(b, s, "stepfresh-", func(ctx context.Context) (int, error) {
		return idem.Step(ctx, "charge", func(context.Context) (int, error) { return 42, nil })
	})
}

var errAfterStep = errors.New("benchkit: failing after the step")

// StepReplay measures an attempt of a call whose step is already recorded:
// fn's step is replayed, then fn fails, so the claim is released and the
// next attempt replays the step again: claim, steps epoch, step claim
// (the replay), release (4 store operations: a replayed step costs 1).
func StepReplay(b *testing.B, s storekit.Store) (ops, beats int) {
	return repeated(b, s, "stepreplay-", func(ctx context.Context) (int, error) {
		if _, err := idem.Step(ctx, "charge", func(context.Context) (int, error) { return 42, nil }); err != nil {
			return 0, err
		}
		return 0, errAfterStep
	}, errAfterStep)
}
