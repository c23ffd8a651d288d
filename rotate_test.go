package idem_test

import (
	"errors"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/storetest"
)

var (
	secretOld = []byte("rotation-test-secret-old")
	secretNew = []byte("rotation-test-secret-new")
)

// TestRotation runs storetest's rotation checks on memstore: store
// operations per call, every case of a record found under a previous
// secret, a tie between Guards mid-deploy, and goroutines configured as
// each deploy of a rotation.
func TestRotation(t *testing.T) {
	storetest.RunRotation(t, func(*testing.T) idem.Store { return mustMem() })
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
