package idem_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idem-go/idem"
)

// TestWithSecretTooShort: an active or previous secret under 16 bytes (an
// HMAC key under 128 bits) is an option error saying so; 16 bytes is
// accepted.
func TestWithSecretTooShort(t *testing.T) {
	s := mustMem()
	long := []byte("0123456789abcdef")
	for _, tc := range []struct {
		name string
		opt  idem.Option
	}{
		{"one-byte active", idem.WithSecret([]byte("a"))},
		{"15-byte active", idem.WithSecret([]byte("0123456789abcde"))},
		{"short previous", idem.WithSecret(long, []byte("old"))},
	} {
		_, err := idem.New[string](s, tc.opt)
		if !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", tc.name, err)
			continue
		}
		if !strings.Contains(err.Error(), "128 bits") {
			t.Errorf("%s: %v does not give the reason (128 bits)", tc.name, err)
		}
	}
	if _, err := idem.New[string](s, idem.WithSecret(long, []byte("fedcba9876543210"))); err != nil {
		t.Errorf("16-byte secrets: %v", err)
	}
}
