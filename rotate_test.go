package idem_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/storetest"
)

var (
	secretOld   = []byte("rotation-test-secret-old")
	secretNew   = []byte("rotation-test-secret-new")
	secretOlder = []byte("rotation-test-secret-older")
)

// rotGuard returns a Guard over s with extra options, failing the test on
// an error.
func rotGuard(t *testing.T, s idem.Store, opts ...idem.Option) *idem.Guard[string] {
	t.Helper()
	g, err := idem.New[string](s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestRotation runs storetest's rotation checks on memstore: every case of
// a record found under a previous secret, a tie between Guards mid-deploy,
// and goroutines configured as each deploy of a rotation.
func TestRotation(t *testing.T) {
	storetest.RunRotation(t, func(*testing.T) idem.Store { return mustMem() })
}

// counted returns fn that counts its runs in n and returns v.
func counted(n *atomic.Int64, v string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		n.Add(1)
		return v, nil
	}
}

// TestRotationRoundTrips: a fresh call during a rotation costs 2 + the
// number of previous secrets; its replay, under the active secret, costs 1.
func TestRotationRoundTrips(t *testing.T) {
	ctx := context.Background()
	for _, prev := range [][][]byte{nil, {secretOld}, {secretOld, secretOlder}} {
		t.Run(fmt.Sprintf("%d previous", len(prev)), func(t *testing.T) {
			s := storetest.Instrument(mustMem())
			g := rotGuard(t, s, idem.WithSecret(secretNew, prev...))
			var runs atomic.Int64
			if _, err := g.Do(ctx, "fresh", counted(&runs, "v")); err != nil {
				t.Fatal(err)
			}
			if got, want := s.Total(), 2+len(prev); got != want {
				t.Errorf("fresh call: %d round trips, want %d", got, want)
			}
			s.Reset()
			if v, err := g.Do(ctx, "fresh", counted(&runs, "w")); err != nil || v != "v" {
				t.Fatalf("replay = %q, %v", v, err)
			}
			if got := s.Total(); got != 1 {
				t.Errorf("replay under the active secret: %d round trips, want 1", got)
			}
		})
	}
}

// TestWithSecretInvalid: bad secrets are option errors, and one argument
// still compiles.
func TestWithSecretInvalid(t *testing.T) {
	s := mustMem()
	for _, tc := range []struct {
		name string
		opt  idem.Option
	}{
		{"empty active", idem.WithSecret(nil)},
		{"empty previous", idem.WithSecret(secretNew, nil)},
		{"previous is active", idem.WithSecret(secretNew, secretNew)},
		{"previous twice", idem.WithSecret(secretNew, secretOld, secretOld)},
	} {
		if _, err := idem.New[string](s, tc.opt); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", tc.name, err)
		}
	}
	if _, err := idem.New[string](s, idem.WithSecret(secretNew), idem.RequireSecret()); err != nil {
		t.Errorf("one secret: %v", err)
	}
}
