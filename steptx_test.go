package idem_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/storetest"
)

// memStepTx is a step run inside a memTx (see tx_test.go): fn runs, then
// the completion is written with Store.Complete, conditioned on the nonce
// (what a store's StepTx does in one transaction). commitErr, when set, is
// reported instead of writing.
func memStepTx[V any](ctx context.Context, name string, fn func(context.Context) (V, error), commitErr error) (V, error) {
	open := func(s storekit.Store) (storekit.TxRunner, error) { return memTx{s: s, commitErr: commitErr}, nil }
	return idem.Step(storekit.WithTx(ctx, open), name, fn)
}

// TestRunStepTx: what a runner reports decides the step's record as
// RunStepTx documents: a commit is replayed without running fn; fn's error
// and a failed commit release the step (the next attempt runs fn, with the
// next fencing token); a lost claim is ErrLostOwnership and releases
// nothing; an unknown outcome is returned with the value.
func TestRunStepTx(t *testing.T) {
	ctx := context.Background()
	g, err := idem.New[int](mustMemStore(t))
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	fn := func(ctx context.Context) (int, error) {
		runs++
		tok, _ := idem.FencingToken(ctx)
		if k, ok := idem.StepKey(ctx); !ok || !stepKeyShape.MatchString(k) {
			t.Errorf("StepKey = %q, %v", k, ok)
		}
		return int(tok), nil
	}
	do := func(key string, commitErr error) (int, error) {
		var stepErr error
		v, err := g.Do(ctx, key, func(ctx context.Context) (int, error) {
			v, err := memStepTx(ctx, "order", fn, commitErr)
			stepErr = err
			return v, nil
		})
		if err != nil {
			t.Fatalf("Do: %v", err)
		}
		return v, stepErr
	}
	// Committed, then replayed within the attempt.
	v, err := g.Do(ctx, "a", func(ctx context.Context) (int, error) {
		first, err := memStepTx(ctx, "order", fn, nil)
		if err != nil {
			return 0, err
		}
		again, err := memStepTx(ctx, "order", fn, nil)
		if err != nil || again != first {
			return 0, fmt.Errorf("replay = %d, %v", again, err)
		}
		return first, nil
	})
	if err != nil || v != 1 || runs != 1 {
		t.Fatalf("committed step: %d, %v, runs %d", v, err, runs)
	}

	// A failed commit releases: the next attempt runs fn again.
	boom := errors.New("commit failed")
	if _, err := do("b", boom); !errors.Is(err, boom) {
		t.Fatalf("failed commit = %v", err)
	} else if se := (*idem.StoreError)(nil); !errors.As(err, &se) || se.Op != "commit" {
		t.Fatalf("failed commit = %v, want a *StoreError{Op: commit}", err)
	}
	if v, err := do("c", nil); err != nil || v != 1 {
		t.Fatalf("another call's step = %d, %v", v, err)
	}

	checkStepTxRetriedAfterRelease(t, fn, boom)

	// A lost claim.
	if _, err := do("d", fmt.Errorf("nonce gone: %w", idem.ErrLostOwnership)); !errors.Is(err, idem.ErrLostOwnership) {
		t.Fatalf("lost = %v", err)
	}
	// An unknown outcome comes with the value.
	unknown := &storekit.OutcomeUnknownError{Err: errors.New("no reply"), ReadErr: errors.New("no read")}
	if v, err := do("e", unknown); !errors.Is(err, idem.ErrOutcomeUnknown) || v != 1 {
		t.Fatalf("unknown = %d, %v", v, err)
	}
	checkStepTxFnErrorReleases(t, fn)
}

// TestRunStepTxInvalid: ErrNoCall outside a guarded fn and inside a step's
// fn; an opener's refusal before any store call; ErrInvalidKey for an
// empty name.
func TestRunStepTxInvalid(t *testing.T) {
	run := func(context.Context) (int, error) { return 1, nil }
	if _, err := memStepTx(context.Background(), "s", run, nil); !errors.Is(err, idem.ErrNoCall) {
		t.Errorf("outside a call: %v", err)
	}
	s := mustMemStore(t)
	in := storetest.Instrument(s)
	g, _ := idem.New[int](in)
	_, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
		before := in.Total()
		refuse := func(storekit.Store) (storekit.TxRunner, error) {
			return nil, &storekit.OptionError{Option: "StepTx", Reason: "not my store"}
		}
		if _, err := idem.Step(storekit.WithTx(ctx, refuse), "s", run); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("refused by the opener: %v", err)
		}
		if n := in.Total() - before; n != 0 {
			t.Errorf("a refused StepTx made %d store calls, want 0", n)
		}
		if _, err := memStepTx(ctx, "", run, nil); !errors.Is(err, idem.ErrInvalidKey) {
			t.Errorf("empty name: %v", err)
		}
		return idem.Step(ctx, "outer", func(ctx context.Context) (int, error) {
			if _, err := memStepTx(ctx, "inner", run, nil); !errors.Is(err, idem.ErrNoCall) {
				t.Errorf("inside a step: %v", err)
			}
			return 1, nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// checkStepTxRetriedAfterRelease: the same call retried after a failed
// commit released its step finds no record of the step and runs fn, token 2.
func checkStepTxRetriedAfterRelease(t *testing.T, fn func(context.Context) (int, error), boom error) {
	t.Helper()
	ctx := context.Background()
	g2, _ := idem.New[int](mustMemStore(t))
	var tokens []int
	for i, commitErr := range []error{boom, nil} {
		_, err := g2.Do(ctx, "k", func(ctx context.Context) (int, error) {
			v, err := memStepTx(ctx, "order", fn, commitErr)
			if err == nil {
				tokens = append(tokens, v)
			}
			return v, err
		})
		if (i == 0) != (err != nil) {
			t.Fatalf("attempt %d: %v", i, err)
		}
	}
	if len(tokens) != 1 || tokens[0] != 2 {
		t.Fatalf("tokens %v: want the step's second claim", tokens)
	}

}

// checkStepTxFnErrorReleases: fn's error releases the step, records
// nothing, and the next attempt runs fn again.
func checkStepTxFnErrorReleases(t *testing.T, fn func(context.Context) (int, error)) {
	t.Helper()
	ctx := context.Background()
	fnErr := errors.New("fn failed")
	g3, _ := idem.New[int](mustMemStore(t))
	_, err := g3.Do(ctx, "f", func(ctx context.Context) (int, error) {
		return memStepTx(ctx, "order", func(context.Context) (int, error) { return 0, fnErr }, nil)
	})
	if !errors.Is(err, fnErr) {
		t.Fatalf("fn's error = %v", err)
	}
	v, err := g3.Do(ctx, "f", func(ctx context.Context) (int, error) { return memStepTx(ctx, "order", fn, nil) })
	if err != nil || v != 2 {
		t.Fatalf("after fn's error = %d, %v; want fn run again, token 2", v, err)
	}
}
