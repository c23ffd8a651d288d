// Package assert is the small set of test assertions the root module's
// tests use. The root module requires no third-party module, not even in
// its tests (a user of the core must not see one in `go list -m all`), so
// these few checks are written here. Each reports with t.Errorf and lets
// the test go on, and returns whether it held; package
// github.com/idem-go/idem/internal/require has the same checks, stopping
// the test instead.
package assert

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"strings"
	"time"
)

// T is the part of testing.TB the checks use.
type T interface {
	Helper()
	Errorf(format string, args ...any)
}

func fail(t T, msg string, msgAndArgs []any) bool {
	t.Helper()
	if len(msgAndArgs) > 0 {
		if f, ok := msgAndArgs[0].(string); ok {
			msg += ": " + fmt.Sprintf(f, msgAndArgs[1:]...)
		} else {
			msg += ": " + fmt.Sprint(msgAndArgs...)
		}
	}
	t.Errorf("%s", msg)
	return false
}

// ObjectsAreEqual reports whether want and got are equal: byte slices by
// content, everything else by reflect.DeepEqual.
func ObjectsAreEqual(want, got any) bool {
	if want == nil || got == nil {
		return want == got
	}
	wb, ok1 := want.([]byte)
	gb, ok2 := got.([]byte)
	if ok1 && ok2 {
		if wb == nil || gb == nil {
			return wb == nil && gb == nil
		}
		return bytes.Equal(wb, gb)
	}
	return reflect.DeepEqual(want, got)
}

// Equal checks that got equals want.
func Equal(t T, want, got any, msgAndArgs ...any) bool {
	t.Helper()
	if ObjectsAreEqual(want, got) {
		return true
	}
	return fail(t, fmt.Sprintf("not equal:\nwant: %#v\n got: %#v", want, got), msgAndArgs)
}

// NotEqual checks that got differs from want.
func NotEqual(t T, want, got any, msgAndArgs ...any) bool {
	t.Helper()
	if !ObjectsAreEqual(want, got) {
		return true
	}
	return fail(t, fmt.Sprintf("should differ from %#v", got), msgAndArgs)
}

// EqualValues checks that got equals want after converting got to want's
// type where Go can.
func EqualValues(t T, want, got any, msgAndArgs ...any) bool {
	t.Helper()
	if ObjectsAreEqual(want, got) {
		return true
	}
	if want != nil && got != nil {
		wv, gv := reflect.ValueOf(want), reflect.ValueOf(got)
		if gv.Type().ConvertibleTo(wv.Type()) && reflect.DeepEqual(gv.Convert(wv.Type()).Interface(), want) {
			return true
		}
	}
	return fail(t, fmt.Sprintf("not equal values:\nwant: %#v\n got: %#v", want, got), msgAndArgs)
}

// NoError checks that err is nil.
func NoError(t T, err error, msgAndArgs ...any) bool {
	t.Helper()
	if err == nil {
		return true
	}
	return fail(t, fmt.Sprintf("unexpected error: %v", err), msgAndArgs)
}

// Error checks that err is not nil.
func Error(t T, err error, msgAndArgs ...any) bool {
	t.Helper()
	if err != nil {
		return true
	}
	return fail(t, "expected an error, got nil", msgAndArgs)
}

// ErrorIs checks errors.Is(err, target).
func ErrorIs(t T, err, target error, msgAndArgs ...any) bool {
	t.Helper()
	if errors.Is(err, target) {
		return true
	}
	return fail(t, fmt.Sprintf("error %v does not match %v", err, target), msgAndArgs)
}

// NotErrorIs checks !errors.Is(err, target).
func NotErrorIs(t T, err, target error, msgAndArgs ...any) bool {
	t.Helper()
	if !errors.Is(err, target) {
		return true
	}
	return fail(t, fmt.Sprintf("error %v should not match %v", err, target), msgAndArgs)
}

// ErrorAs checks errors.As(err, target).
func ErrorAs(t T, err error, target any, msgAndArgs ...any) bool {
	t.Helper()
	if errors.As(err, target) {
		return true
	}
	return fail(t, fmt.Sprintf("error %v is not a %T", err, target), msgAndArgs)
}

// True checks that v is true.
func True(t T, v bool, msgAndArgs ...any) bool {
	t.Helper()
	if v {
		return true
	}
	return fail(t, "should be true", msgAndArgs)
}

// False checks that v is false.
func False(t T, v bool, msgAndArgs ...any) bool {
	t.Helper()
	if !v {
		return true
	}
	return fail(t, "should be false", msgAndArgs)
}

func isNil(v any) bool {
	if v == nil {
		return true
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Chan, reflect.Func, reflect.Interface, reflect.Map, reflect.Pointer, reflect.Slice, reflect.UnsafePointer:
		return rv.IsNil()
	}
	return false
}

// Nil checks that v is nil (a nil interface or a nil pointer, map, slice...).
func Nil(t T, v any, msgAndArgs ...any) bool {
	t.Helper()
	if isNil(v) {
		return true
	}
	return fail(t, fmt.Sprintf("expected nil, got %#v", v), msgAndArgs)
}

// NotNil checks that v is not nil.
func NotNil(t T, v any, msgAndArgs ...any) bool {
	t.Helper()
	if !isNil(v) {
		return true
	}
	return fail(t, "expected a value, got nil", msgAndArgs)
}

func isZero(v any) bool { return v == nil || reflect.ValueOf(v).IsZero() }

func length(v any) (int, bool) {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Array, reflect.Chan, reflect.Map, reflect.Slice, reflect.String:
		return rv.Len(), true
	}
	return 0, false
}

// Zero checks that v is its type's zero value.
func Zero(t T, v any, msgAndArgs ...any) bool {
	t.Helper()
	if isZero(v) {
		return true
	}
	return fail(t, fmt.Sprintf("expected zero value, got %#v", v), msgAndArgs)
}

// Empty checks that v is empty: zero, or of length 0.
func Empty(t T, v any, msgAndArgs ...any) bool {
	t.Helper()
	if n, ok := length(v); (ok && n == 0) || (!ok && isZero(v)) {
		return true
	}
	return fail(t, fmt.Sprintf("expected empty, got %#v", v), msgAndArgs)
}

// NotEmpty checks that v is not empty.
func NotEmpty(t T, v any, msgAndArgs ...any) bool {
	t.Helper()
	if n, ok := length(v); (ok && n > 0) || (!ok && !isZero(v)) {
		return true
	}
	return fail(t, "expected a non-empty value", msgAndArgs)
}

// Len checks that v (array, chan, map, slice or string) has length n.
func Len(t T, v any, n int, msgAndArgs ...any) bool {
	t.Helper()
	if got, ok := length(v); ok && got == n {
		return true
	}
	return fail(t, fmt.Sprintf("expected length %d: %#v", n, v), msgAndArgs)
}

func contains(s, elem any) bool {
	if str, ok := s.(string); ok {
		sub, ok := elem.(string)
		return ok && strings.Contains(str, sub)
	}
	rv := reflect.ValueOf(s)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		for i := 0; i < rv.Len(); i++ {
			if ObjectsAreEqual(rv.Index(i).Interface(), elem) {
				return true
			}
		}
	case reflect.Map:
		for _, k := range rv.MapKeys() {
			if ObjectsAreEqual(k.Interface(), elem) {
				return true
			}
		}
	}
	return false
}

// Contains checks that s (a string, slice, array or map's keys) contains elem.
func Contains(t T, s, elem any, msgAndArgs ...any) bool {
	t.Helper()
	if contains(s, elem) {
		return true
	}
	return fail(t, fmt.Sprintf("%#v does not contain %#v", s, elem), msgAndArgs)
}

// NotContains checks that s does not contain elem.
func NotContains(t T, s, elem any, msgAndArgs ...any) bool {
	t.Helper()
	if !contains(s, elem) {
		return true
	}
	return fail(t, fmt.Sprintf("%#v should not contain %#v", s, elem), msgAndArgs)
}

// ElementsMatch checks that two slices hold the same elements in any order.
func ElementsMatch(t T, want, got any, msgAndArgs ...any) bool {
	t.Helper()
	wv, gv := reflect.ValueOf(want), reflect.ValueOf(got)
	if wv.Len() == gv.Len() {
		used := make([]bool, gv.Len())
		matched := 0
		for i := 0; i < wv.Len(); i++ {
			for j := 0; j < gv.Len(); j++ {
				if !used[j] && ObjectsAreEqual(wv.Index(i).Interface(), gv.Index(j).Interface()) {
					used[j] = true
					matched++
					break
				}
			}
		}
		if matched == wv.Len() {
			return true
		}
	}
	return fail(t, fmt.Sprintf("elements differ:\nwant: %#v\n got: %#v", want, got), msgAndArgs)
}

// Regexp checks that s matches the regular expression re.
func Regexp(t T, re, s string, msgAndArgs ...any) bool {
	t.Helper()
	if regexp.MustCompile(re).MatchString(s) {
		return true
	}
	return fail(t, fmt.Sprintf("%q does not match %q", s, re), msgAndArgs)
}

// Greater checks a > b.
func Greater[O cmp.Ordered](t T, a, b O, msgAndArgs ...any) bool {
	t.Helper()
	if a > b {
		return true
	}
	return fail(t, fmt.Sprintf("%v is not greater than %v", a, b), msgAndArgs)
}

// GreaterOrEqual checks a >= b.
func GreaterOrEqual[O cmp.Ordered](t T, a, b O, msgAndArgs ...any) bool {
	t.Helper()
	if a >= b {
		return true
	}
	return fail(t, fmt.Sprintf("%v is not greater than or equal to %v", a, b), msgAndArgs)
}

// Less checks a < b.
func Less[O cmp.Ordered](t T, a, b O, msgAndArgs ...any) bool {
	t.Helper()
	if a < b {
		return true
	}
	return fail(t, fmt.Sprintf("%v is not less than %v", a, b), msgAndArgs)
}

// LessOrEqual checks a <= b.
func LessOrEqual[O cmp.Ordered](t T, a, b O, msgAndArgs ...any) bool {
	t.Helper()
	if a <= b {
		return true
	}
	return fail(t, fmt.Sprintf("%v is not less than or equal to %v", a, b), msgAndArgs)
}

// InDelta checks |want - got| <= delta.
func InDelta[N ~int | ~int64 | ~float64](t T, want, got N, delta float64, msgAndArgs ...any) bool {
	t.Helper()
	if d := float64(want) - float64(got); d <= delta && -d <= delta {
		return true
	}
	return fail(t, fmt.Sprintf("%v and %v differ by more than %v", want, got, delta), msgAndArgs)
}

// Eventually checks that cond returns true within waitFor, trying every tick.
func Eventually(t T, cond func() bool, waitFor, tick time.Duration, msgAndArgs ...any) bool {
	t.Helper()
	deadline := time.Now().Add(waitFor)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return fail(t, fmt.Sprintf("condition not met within %v", waitFor), msgAndArgs)
		}
		time.Sleep(tick)
	}
}
