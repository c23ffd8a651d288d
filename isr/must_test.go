package isr_test

import (
	"testing"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/internal/isrtesting"
)

// The constructors of the tests' fixtures, failing the test on an error.

var (
	mustCoordinator = isrtesting.MustCoordinator
	mustHandler     = isrtesting.MustHandler
	mustPK          = isrtesting.MustPK
	get             = isrtesting.Get
	do              = isrtesting.Do
	render          = isrtesting.Render
	seedStale       = isrtesting.SeedStale
)

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
