package idem_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/memstore"
)

// memStepTx is a step transaction runner over a store without
// transactions: fn runs, then the completion is written with
// Store.Complete, conditioned on the nonce (what a store's StepTx does in
// one transaction). commitErr, when set, is reported instead of writing.
func memStepTx[V any](ctx context.Context, name string, fn func(context.Context) (V, error), commitErr error) (V, error) {
	st, err := idem.CallStore(ctx)
	if err != nil {
		var zero V
		return zero, err
	}
	return idem.RunStepTx(ctx, name, func(ctx context.Context, c *idem.StepTxClaim[V]) (V, error, error) {
		v, err := fn(ctx)
		if err != nil {
			return v, err, nil
		}
		comp, err := c.Complete(v)
		if err != nil {
			return v, nil, err
		}
		if commitErr != nil {
			return v, nil, commitErr
		}
		return v, nil, st.Complete(ctx, c.Key, c.Nonce, comp)
	})
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

	// The same call retried after the release: its next attempt finds no
	// record of the step (it was released) and runs fn, token 2.
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

	// A lost claim.
	if _, err := do("d", fmt.Errorf("nonce gone: %w", idem.ErrLostOwnership)); !errors.Is(err, idem.ErrLostOwnership) {
		t.Fatalf("lost = %v", err)
	}
	// An unknown outcome comes with the value.
	unknown := &storekit.OutcomeUnknownError{Err: errors.New("no reply"), ReadErr: errors.New("no read")}
	if v, err := do("e", unknown); !errors.Is(err, idem.ErrOutcomeUnknown) || v != 1 {
		t.Fatalf("unknown = %d, %v", v, err)
	}
	// fn's error: released, not recorded.
	fnErr := errors.New("fn failed")
	g3, _ := idem.New[int](mustMemStore(t))
	_, err = g3.Do(ctx, "f", func(ctx context.Context) (int, error) {
		return memStepTx(ctx, "order", func(context.Context) (int, error) { return 0, fnErr }, nil)
	})
	if !errors.Is(err, fnErr) {
		t.Fatalf("fn's error = %v", err)
	}
	v, err = g3.Do(ctx, "f", func(ctx context.Context) (int, error) { return memStepTx(ctx, "order", fn, nil) })
	if err != nil || v != 2 {
		t.Fatalf("after fn's error = %d, %v; want fn run again, token 2", v, err)
	}
}

// TestRunStepTxInvalid: ErrNoCall outside a guarded fn and inside a step's
// fn; ErrInvalidOption for a nil ctx or runner; ErrInvalidKey for an
// empty name.
func TestRunStepTxInvalid(t *testing.T) {
	run := func(context.Context, *idem.StepTxClaim[int]) (int, error, error) { return 1, nil, nil }
	if _, err := idem.RunStepTx(context.Background(), "s", run); !errors.Is(err, idem.ErrNoCall) {
		t.Errorf("outside a call: %v", err)
	}
	if _, err := idem.CallStore(context.Background()); !errors.Is(err, idem.ErrNoCall) {
		t.Errorf("CallStore outside a call: %v", err)
	}
	//lint:ignore SA1012 a nil context is what is tested
	if _, err := idem.CallStore(nil); !errors.Is(err, idem.ErrInvalidOption) { //nolint:staticcheck
		t.Errorf("CallStore(nil): %v", err)
	}
	var c *idem.StepTxClaim[int]
	if _, err := c.Complete(1); !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("nil StepTxClaim: %v", err)
	}
	s := mustMemStore(t)
	g, _ := idem.New[int](s)
	_, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
		if st, err := idem.CallStore(ctx); err != nil || st != storekit.Store(s) {
			t.Errorf("CallStore = %v, %v", st, err)
		}
		if _, err := idem.RunStepTx[int](ctx, "s", nil); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("nil runner: %v", err)
		}
		if _, err := idem.RunStepTx(ctx, "", run); !errors.Is(err, idem.ErrInvalidKey) {
			t.Errorf("empty name: %v", err)
		}
		//lint:ignore SA1012 a nil context is what is tested
		if _, err := idem.RunStepTx(nil, "s", run); !errors.Is(err, idem.ErrInvalidOption) { //nolint:staticcheck
			t.Errorf("nil ctx: %v", err)
		}
		return idem.Step(ctx, "outer", func(ctx context.Context) (int, error) {
			if _, err := idem.RunStepTx(ctx, "inner", run); !errors.Is(err, idem.ErrNoCall) {
				t.Errorf("inside a step: %v", err)
			}
			if _, err := idem.CallStore(ctx); !errors.Is(err, idem.ErrNoCall) {
				t.Errorf("CallStore inside a step: %v", err)
			}
			return 1, nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// A store package's StepTx is built on CallStore and RunStepTx: here the
// "transaction" is memstore's conditioned Complete. The second attempt of
// the call replays the step without running it.
func ExampleRunStepTx() {
	ctx := context.Background()
	store, _ := memstore.New()
	g, _ := idem.New[string](store)
	stepTx := func(ctx context.Context, name string, fn func(context.Context) (string, error)) (string, error) {
		st, err := idem.CallStore(ctx) // a real store package checks it is one of its own
		if err != nil {
			return "", err
		}
		return idem.RunStepTx(ctx, name, func(ctx context.Context, c *idem.StepTxClaim[string]) (string, error, error) {
			v, err := fn(ctx) // in a store transaction
			if err != nil {
				return v, err, nil
			}
			comp, err := c.Complete(v)
			if err != nil {
				return v, nil, err
			}
			return v, nil, st.Complete(ctx, c.Key, c.Nonce, comp) // in the same transaction, then commit
		})
	}
	for attempt := 1; attempt <= 2; attempt++ {
		_, err := g.Do(ctx, "checkout-1", func(ctx context.Context) (string, error) {
			id, err := stepTx(ctx, "order", func(context.Context) (string, error) {
				fmt.Println("order written")
				return "ord-1", nil
			})
			fmt.Println("attempt", attempt, id, err)
			if attempt == 1 {
				return "", errors.New("e-mail failed") // released: the call is tried again
			}
			return id, nil
		})
		if err != nil {
			fmt.Println(err)
		}
	}
	// Output:
	// order written
	// attempt 1 ord-1 <nil>
	// e-mail failed
	// attempt 2 ord-1 <nil>
}
