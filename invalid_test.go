package idem_test

import (
	"context"
	"errors"
	"testing"

	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

// Bad input to the public API is an error matching ErrInvalidOption, never
// a panic.
func TestInvalidCallsAreErrors(t *testing.T) {
	g, _ := memGuard[int](t)
	var nilGuard *idem.Guard[int]
	var zeroGuard idem.Guard[int]
	fn := func(context.Context) (int, error) { return 1, nil }
	var nilCtx context.Context
	ctx := context.Background()
	cases := map[string]func() error{
		"Do nil ctx":        func() error { _, err := g.Do(nilCtx, "k", fn); return err },
		"Do nil fn":         func() error { _, err := g.Do(ctx, "k", nil); return err },
		"Do nil Guard":      func() error { _, err := nilGuard.Do(ctx, "k", fn); return err },
		"Do zero Guard":     func() error { _, err := zeroGuard.Do(ctx, "k", fn); return err },
		"Forget nil ctx":    func() error { return g.Forget(nilCtx, "k") },
		"Forget nil Guard":  func() error { return nilGuard.Forget(ctx, "k") },
		"Forget zero Guard": func() error { return zeroGuard.Forget(ctx, "k") },
		"Step nil ctx":      func() error { _, err := idem.Step(nilCtx, "s", fn); return err },
		"Step nil fn":       func() error { _, err := idem.Step[int](ctx, "s", nil); return err },
		"WithTx opener refuses": func() error {
			_, err := g.Do(storekit.WithTx(ctx, func(storekit.Store) (storekit.TxRunner, error) {
				return nil, &storekit.OptionError{Option: "DoTx", Reason: "not my store"}
			}), "k", fn)
			return err
		},
		"WithTx opener without a runner": func() error {
			_, err := g.Do(storekit.WithTx(ctx, func(storekit.Store) (storekit.TxRunner, error) { return nil, nil }), "k", fn)
			return err
		},
		"Wrap over a zero Guard": func() error {
			_, err := idem.Wrap(&zeroGuard, "n", func(context.Context, int) (int, error) { return 1, nil })(ctx, 1)
			return err
		},
		"Wrap over a nil Guard": func() error {
			_, err := idem.Wrap(nilGuard, "n", func(context.Context, int) (int, error) { return 1, nil })(ctx, 1)
			return err
		},
		"Wrap of a nil function":  func() error { _, err := idem.Wrap[int, int](g, "n", nil)(ctx, 1); return err },
		"Do nil ctx on nil Guard": func() error { _, err := nilGuard.Do(nilCtx, "k", nil); return err },
	}
	for name, call := range cases {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("panicked: %v", p)
				}
			}()
			err := call()
			var oe *storekit.OptionError
			if !errors.Is(err, idem.ErrInvalidOption) || !errors.As(err, &oe) {
				t.Fatalf("err = %v, want an *OptionError matching ErrInvalidOption", err)
			}
		})
	}
	if info, ok := guardinfo.Of(nilGuard); ok || info.Store != nil {
		t.Errorf("a nil Guard's info = %+v, %v; want none", info, ok)
	}
}
