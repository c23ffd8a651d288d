package benchkit

import (
	"context"
	"errors"
	"strconv"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/storetest"
)

// StepFresh measures Do of a fresh key whose fn runs one recorded step:
// claim, steps epoch, step claim, step complete, complete (5 store
// operations: a step that runs costs 2, the first step of an attempt 1
// more for the epoch).
func StepFresh(b *testing.B, s idem.Store) (ops, beats int) {
	inst := storetest.Instrument(s)
	g, err := idem.New[int](inst)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	fn := func(ctx context.Context) (int, error) {
		return idem.Step(ctx, "charge", func(context.Context) (int, error) { return 42, nil })
	}
	prefix := uniq("stepfresh-") + "-"
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := g.Do(ctx, prefix+strconv.Itoa(i), fn); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	report(b, inst)
	return inst.Total(), inst.Count(storetest.OpHeartbeat)
}

var errAfterStep = errors.New("benchkit: failing after the step")

// StepReplay measures an attempt of a call whose step is already recorded:
// fn's step is replayed, then fn fails, so the claim is released and the
// next attempt replays the step again: claim, steps epoch, step claim
// (the replay), release (4 store operations: a replayed step costs 1).
func StepReplay(b *testing.B, s idem.Store) (ops, beats int) {
	inst := storetest.Instrument(s)
	g, err := idem.New[int](inst)
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	key := uniq("stepreplay-")
	fn := func(ctx context.Context) (int, error) {
		if _, err := idem.Step(ctx, "charge", func(context.Context) (int, error) { return 42, nil }); err != nil {
			return 0, err
		}
		return 0, errAfterStep
	}
	if _, err := g.Do(ctx, key, fn); !errors.Is(err, errAfterStep) {
		b.Fatal(err)
	}
	inst.Reset()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := g.Do(ctx, key, fn); !errors.Is(err, errAfterStep) {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	report(b, inst)
	return inst.Total(), inst.Count(storetest.OpHeartbeat)
}
