package isr_test

import (
	"testing"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/body"
)

// The constructors of the tests' fixtures, failing the test on an error.

func mustCoordinator(t testing.TB, tb isr.Table, opts ...isr.Option) *isr.Coordinator {
	t.Helper()
	c, err := isr.NewCoordinator(tb, opts...)
	if err != nil {
		t.Fatalf("NewCoordinator: %v", err)
	}
	return c
}

func mustHandler(t testing.TB, c *isr.Coordinator, bodies body.Store, render isr.PageFunc, opts ...isr.HandlerOption) *isr.Handler {
	t.Helper()
	h, err := isr.NewHandler(c, bodies, render, opts...)
	if err != nil {
		t.Fatalf("NewHandler: %v", err)
	}
	return h
}

// newMemoryTable is a MemoryTable closed when the test ends.
func newMemoryTable(t testing.TB, opts ...isr.TableOption) *isr.MemoryTable {
	t.Helper()
	tb, err := isr.NewMemoryTable(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tb.Close() })
	return tb
}
