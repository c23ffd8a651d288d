package storetest

import (
	"errors"
	"slices"
	"testing"

	"github.com/idem-go/idem/storekit"
)

// CheckOptionErrors checks what a constructor returned for invalid
// options: an error matching storekit.ErrInvalidOption that holds one
// *storekit.OptionError per rejected option, named as in options, in the
// order the options were given (every option checked, none dropped).
// Every constructor in this repository reports invalid options so.
func CheckOptionErrors(t testing.TB, err error, options ...string) {
	t.Helper()
	if !errors.Is(err, storekit.ErrInvalidOption) {
		t.Fatalf("got %v, want an error matching storekit.ErrInvalidOption", err)
	}
	var oe *storekit.OptionError
	if !errors.As(err, &oe) {
		t.Fatalf("got %v (%T), want an *storekit.OptionError in it", err, err)
	}
	var got []string
	for _, e := range unjoin(err) {
		if errors.As(e, &oe) {
			got = append(got, oe.Option)
		}
	}
	if !slices.Equal(got, options) {
		t.Fatalf("rejected options: got %q, want %q (error: %v)", got, options, err)
	}
}

// unjoin flattens errors joined with errors.Join.
func unjoin(err error) []error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return []error{err}
	}
	var out []error
	for _, e := range j.Unwrap() {
		out = append(out, unjoin(e)...)
	}
	return out
}
