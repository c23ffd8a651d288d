// Package require has the checks of package
// github.com/idem-go/idem/internal/assert, each stopping the test
// (t.FailNow) when it does not hold. See package assert for why the root
// module keeps its own.
package require

import (
	"cmp"
	"time"

	"github.com/idem-go/idem/internal/assert"
)

// T is the part of testing.TB the checks use.
type T interface {
	assert.T
	FailNow()
}

// Equal checks that got equals want; it stops the test if not.
func Equal(t T, want, got any, msgAndArgs ...any) {
	t.Helper()
	if !assert.Equal(t, want, got, msgAndArgs...) {
		t.FailNow()
	}
}

// NotEqual checks that got differs from want; it stops the test if not.
func NotEqual(t T, want, got any, msgAndArgs ...any) {
	t.Helper()
	if !assert.NotEqual(t, want, got, msgAndArgs...) {
		t.FailNow()
	}
}

// EqualValues checks that got equals want after converting got to want's
// type where Go can; it stops the test if not.
func EqualValues(t T, want, got any, msgAndArgs ...any) {
	t.Helper()
	if !assert.EqualValues(t, want, got, msgAndArgs...) {
		t.FailNow()
	}
}

// NoError checks that err is nil; it stops the test if not.
func NoError(t T, err error, msgAndArgs ...any) {
	t.Helper()
	if !assert.NoError(t, err, msgAndArgs...) {
		t.FailNow()
	}
}

// Error checks that err is not nil; it stops the test if not.
func Error(t T, err error, msgAndArgs ...any) {
	t.Helper()
	if !assert.Error(t, err, msgAndArgs...) {
		t.FailNow()
	}
}

// ErrorIs checks errors.Is(err, target); it stops the test if not.
func ErrorIs(t T, err, target error, msgAndArgs ...any) {
	t.Helper()
	if !assert.ErrorIs(t, err, target, msgAndArgs...) {
		t.FailNow()
	}
}

// NotErrorIs checks !errors.Is(err, target); it stops the test if not.
func NotErrorIs(t T, err, target error, msgAndArgs ...any) {
	t.Helper()
	if !assert.NotErrorIs(t, err, target, msgAndArgs...) {
		t.FailNow()
	}
}

// ErrorAs checks errors.As(err, target); it stops the test if not.
func ErrorAs(t T, err error, target any, msgAndArgs ...any) {
	t.Helper()
	if !assert.ErrorAs(t, err, target, msgAndArgs...) {
		t.FailNow()
	}
}

// True checks that v is true; it stops the test if not.
func True(t T, v bool, msgAndArgs ...any) {
	t.Helper()
	if !assert.True(t, v, msgAndArgs...) {
		t.FailNow()
	}
}

// False checks that v is false; it stops the test if not.
func False(t T, v bool, msgAndArgs ...any) {
	t.Helper()
	if !assert.False(t, v, msgAndArgs...) {
		t.FailNow()
	}
}

// Nil checks that v is nil (a nil interface or a nil pointer, map, slice...); it stops the test if not.
func Nil(t T, v any, msgAndArgs ...any) {
	t.Helper()
	if !assert.Nil(t, v, msgAndArgs...) {
		t.FailNow()
	}
}

// NotNil checks that v is not nil; it stops the test if not.
func NotNil(t T, v any, msgAndArgs ...any) {
	t.Helper()
	if !assert.NotNil(t, v, msgAndArgs...) {
		t.FailNow()
	}
}

// Zero checks that v is its type's zero value; it stops the test if not.
func Zero(t T, v any, msgAndArgs ...any) {
	t.Helper()
	if !assert.Zero(t, v, msgAndArgs...) {
		t.FailNow()
	}
}

// Empty checks that v is empty: zero, or of length 0; it stops the test if not.
func Empty(t T, v any, msgAndArgs ...any) {
	t.Helper()
	if !assert.Empty(t, v, msgAndArgs...) {
		t.FailNow()
	}
}

// NotEmpty checks that v is not empty; it stops the test if not.
func NotEmpty(t T, v any, msgAndArgs ...any) {
	t.Helper()
	if !assert.NotEmpty(t, v, msgAndArgs...) {
		t.FailNow()
	}
}

// Len checks that v (array, chan, map, slice or string) has length n; it stops the test if not.
func Len(t T, v any, n int, msgAndArgs ...any) {
	t.Helper()
	if !assert.Len(t, v, n, msgAndArgs...) {
		t.FailNow()
	}
}

// Contains checks that s (a string, slice, array or map's keys) contains elem; it stops the test if not.
func Contains(t T, s, elem any, msgAndArgs ...any) {
	t.Helper()
	if !assert.Contains(t, s, elem, msgAndArgs...) {
		t.FailNow()
	}
}

// NotContains checks that s does not contain elem; it stops the test if not.
func NotContains(t T, s, elem any, msgAndArgs ...any) {
	t.Helper()
	if !assert.NotContains(t, s, elem, msgAndArgs...) {
		t.FailNow()
	}
}

// ElementsMatch checks that two slices hold the same elements in any order; it stops the test if not.
func ElementsMatch(t T, want, got any, msgAndArgs ...any) {
	t.Helper()
	if !assert.ElementsMatch(t, want, got, msgAndArgs...) {
		t.FailNow()
	}
}

// Regexp checks that s matches the regular expression re; it stops the test if not.
func Regexp(t T, re, s string, msgAndArgs ...any) {
	t.Helper()
	if !assert.Regexp(t, re, s, msgAndArgs...) {
		t.FailNow()
	}
}

// Greater checks a > b; it stops the test if not.
func Greater[O cmp.Ordered](t T, a, b O, msgAndArgs ...any) {
	t.Helper()
	if !assert.Greater(t, a, b, msgAndArgs...) {
		t.FailNow()
	}
}

// GreaterOrEqual checks a >= b; it stops the test if not.
func GreaterOrEqual[O cmp.Ordered](t T, a, b O, msgAndArgs ...any) {
	t.Helper()
	if !assert.GreaterOrEqual(t, a, b, msgAndArgs...) {
		t.FailNow()
	}
}

// Less checks a < b; it stops the test if not.
func Less[O cmp.Ordered](t T, a, b O, msgAndArgs ...any) {
	t.Helper()
	if !assert.Less(t, a, b, msgAndArgs...) {
		t.FailNow()
	}
}

// LessOrEqual checks a <= b; it stops the test if not.
func LessOrEqual[O cmp.Ordered](t T, a, b O, msgAndArgs ...any) {
	t.Helper()
	if !assert.LessOrEqual(t, a, b, msgAndArgs...) {
		t.FailNow()
	}
}

// InDelta checks |want - got| <= delta; it stops the test if not.
func InDelta[N ~int | ~int64 | ~float64](t T, want, got N, delta float64, msgAndArgs ...any) {
	t.Helper()
	if !assert.InDelta(t, want, got, delta, msgAndArgs...) {
		t.FailNow()
	}
}

// Eventually checks that cond returns true within waitFor, trying every
// tick; it stops the test if not.
func Eventually(t T, cond func() bool, waitFor, tick time.Duration, msgAndArgs ...any) {
	t.Helper()
	if !assert.Eventually(t, cond, waitFor, tick, msgAndArgs...) {
		t.FailNow()
	}
}
