package storetest

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/idem-go/idem/storekit"
)

// CheckUnmade checks what a value that its constructor did not make (a
// nil pointer, a zero value) does when it is used. Every call in errs
// must return an *storekit.OptionError matching storekit.ErrInvalidOption; every
// call in others (the methods that return no error) must return the zero
// value of its result, or nil. None may panic. The keys of the two maps
// are method names, and together they must be every exported method of
// typ (the pointer type, for pointer receivers), so that a method added
// later without a case fails the check.
func CheckUnmade(t *testing.T, typ reflect.Type, errs map[string]func() error, others map[string]func() any) {
	t.Helper()
	var names []string
	for i := range typ.NumMethod() {
		names = append(names, typ.Method(i).Name)
	}
	var covered []string
	for name := range errs {
		covered = append(covered, name)
	}
	for name := range others {
		covered = append(covered, name)
	}
	slices.Sort(covered)
	if !slices.Equal(names, covered) {
		t.Errorf("%v: cases for %q, want one for each exported method %q", typ, covered, names)
	}
	for name, call := range errs {
		t.Run(name, func(t *testing.T) {
			err := recovered(call)
			var oe *storekit.OptionError
			if !errors.Is(err, storekit.ErrInvalidOption) || !errors.As(err, &oe) {
				t.Errorf("%v.%s: %v, want an *storekit.OptionError matching storekit.ErrInvalidOption", typ, name, err)
			}
		})
	}
	for name, call := range others {
		t.Run(name, func(t *testing.T) {
			var v any
			if err := recovered(func() error { v = call(); return nil }); err != nil {
				t.Errorf("%v.%s: %v", typ, name, err)
				return
			}
			if v != nil && !reflect.ValueOf(v).IsZero() {
				t.Errorf("%v.%s = %v, want the zero value", typ, name, v)
			}
		})
	}
}

// errPanicked is what recovered returns for a call that panicked.
var errPanicked = errors.New("panicked")

// recovered runs call and returns its error, or one wrapping errPanicked
// if it panicked.
func recovered(call func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v", errPanicked, p)
		}
	}()
	return call()
}
