package storetest

import (
	"cmp"
	"errors"
	"fmt"
	"reflect"
	"testing"
)

// The suite's assertions: the standard library only, so that a store
// author's tests need nothing else. The assert* ones report and go on; the
// require* ones stop the subtest.

func msg(msgAndArgs []any) string {
	switch len(msgAndArgs) {
	case 0:
		return ""
	case 1:
		return ": " + fmt.Sprint(msgAndArgs[0])
	}
	return ": " + fmt.Sprintf(fmt.Sprint(msgAndArgs[0]), msgAndArgs[1:]...)
}

func assertEqual(t *testing.T, want, got any, msgAndArgs ...any) bool {
	t.Helper()
	if !reflect.DeepEqual(want, got) {
		t.Errorf("got %#v, want %#v%s", got, want, msg(msgAndArgs))
		return false
	}
	return true
}

func requireEqual(t *testing.T, want, got any, msgAndArgs ...any) {
	t.Helper()
	if !assertEqual(t, want, got, msgAndArgs...) {
		t.FailNow()
	}
}

func assertNoError(t *testing.T, err error, msgAndArgs ...any) bool {
	t.Helper()
	if err != nil {
		t.Errorf("unexpected error: %v%s", err, msg(msgAndArgs))
		return false
	}
	return true
}

func requireNoError(t *testing.T, err error, msgAndArgs ...any) {
	t.Helper()
	if !assertNoError(t, err, msgAndArgs...) {
		t.FailNow()
	}
}

func assertError(t *testing.T, err error, msgAndArgs ...any) bool {
	t.Helper()
	if err == nil {
		t.Errorf("no error%s", msg(msgAndArgs))
		return false
	}
	return true
}

func assertErrorIs(t *testing.T, err, target error, msgAndArgs ...any) bool {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("error %v does not match %v%s", err, target, msg(msgAndArgs))
		return false
	}
	return true
}

func assertTrue(t *testing.T, ok bool, msgAndArgs ...any) bool {
	t.Helper()
	if !ok {
		t.Errorf("false%s", msg(msgAndArgs))
	}
	return ok
}

func assertNil(t *testing.T, v any, msgAndArgs ...any) bool {
	t.Helper()
	if v != nil && !reflect.ValueOf(v).IsNil() {
		t.Errorf("got %#v, want nil%s", v, msg(msgAndArgs))
		return false
	}
	return true
}

func requireNotNil(t *testing.T, v any, msgAndArgs ...any) {
	t.Helper()
	if v == nil || reflect.ValueOf(v).IsNil() {
		t.Fatalf("got nil%s", msg(msgAndArgs))
	}
}

func assertEmpty(t *testing.T, b []byte, msgAndArgs ...any) bool {
	t.Helper()
	if len(b) != 0 {
		t.Errorf("got %q, want empty%s", b, msg(msgAndArgs))
		return false
	}
	return true
}

func assertZero(t *testing.T, v int64, msgAndArgs ...any) bool {
	t.Helper()
	if v != 0 {
		t.Errorf("got %d, want 0%s", v, msg(msgAndArgs))
		return false
	}
	return true
}

func assertLess[T cmp.Ordered](t *testing.T, a, b T, msgAndArgs ...any) bool {
	t.Helper()
	if !(a < b) {
		t.Errorf("%v is not less than %v%s", a, b, msg(msgAndArgs))
		return false
	}
	return true
}

func assertGreater[T cmp.Ordered](t *testing.T, a, b T, msgAndArgs ...any) bool {
	t.Helper()
	if !(a > b) {
		t.Errorf("%v is not greater than %v%s", a, b, msg(msgAndArgs))
		return false
	}
	return true
}

func assertGreaterOrEqual[T cmp.Ordered](t *testing.T, a, b T, msgAndArgs ...any) bool {
	t.Helper()
	if a < b {
		t.Errorf("%v is less than %v%s", a, b, msg(msgAndArgs))
		return false
	}
	return true
}

func assertInDelta(t *testing.T, want, got, delta int64, msgAndArgs ...any) bool {
	t.Helper()
	if d := got - want; d > delta || d < -delta {
		t.Errorf("got %d, want %d within %d%s", got, want, delta, msg(msgAndArgs))
		return false
	}
	return true
}
