package body_test

import (
	"context"
	"reflect"
	"testing"

	"github.com/idem-go/idem/isr/body"
	"github.com/idem-go/idem/stores/storetest"
)

// storeCalls are the Store methods called on s.
func storeCalls(s body.Store) map[string]func() error {
	ctx := context.Background()
	return map[string]func() error{
		"Put":    func() error { _, err := s.Put(ctx, "k", []byte("x"), "text/plain"); return err },
		"Get":    func() error { _, err := s.Get(ctx, "k"); return err },
		"Delete": func() error { return s.Delete(ctx, "k") },
	}
}

// checkUnmade runs storetest.CheckUnmade on a nil and on a zero value of
// *T, with the cases calls makes for each.
func checkUnmade[T any](t *testing.T, calls func(*T) (map[string]func() error, map[string]func() any)) {
	for name, v := range map[string]*T{"nil": nil, "zero": new(T)} {
		t.Run(name, func(t *testing.T) {
			errs, others := calls(v)
			storetest.CheckUnmade(t, reflect.TypeFor[*T](), errs, others)
		})
	}
}

// Every exported method of a store its constructor did not make returns
// an error matching idem.ErrInvalidOption (or a zero result), never
// panics, and never touches a file.
func TestUnmadeStores(t *testing.T) {
	t.Chdir(t.TempDir()) // a zero File must not write under the working directory
	t.Run("File", func(t *testing.T) {
		checkUnmade(t, func(f *body.File) (map[string]func() error, map[string]func() any) {
			return storeCalls(f), map[string]func() any{
				"Dir":  func() any { return f.Dir() },
				"Path": func() any { return f.Path("k") },
			}
		})
	})
	t.Run("Memory", func(t *testing.T) {
		checkUnmade(t, func(m *body.Memory) (map[string]func() error, map[string]func() any) {
			return storeCalls(m), map[string]func() any{"Len": func() any { return m.Len() }}
		})
	})
}
