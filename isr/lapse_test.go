package isr_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/internal/isrtesting"
)

// A lease holder whose refreshes fail stops rendering before another worker
// could acquire the lease, and does not publish; on files its refreshes
// fail.
func TestLeaseLapseStopsRender(t *testing.T) {
	dir := t.TempDir()
	other := newFileTable(t, dir)
	holder := &failingRefresh{Table: newFileTable(t, dir)}
	isrtesting.RunLeaseLapse(t, isrtesting.LapseCase{Holder: holder, Other: other, Cut: func() { holder.failing.Store(true) }})
}

// failingRefresh is a Table whose refreshes fail once failing is set, as
// if the table could not be reached.
type failingRefresh struct {
	isr.Table
	failing atomic.Bool
}

func (f *failingRefresh) RefreshLease(ctx context.Context, in isr.RefreshInput) (isr.Lease, error) {
	if f.failing.Load() {
		return isr.Lease{}, errors.New("table unreachable")
	}
	return f.Table.RefreshLease(ctx, in)
}
