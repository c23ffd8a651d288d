package isr_test

import (
	"context"
	"sync/atomic"

	"github.com/idem-go/idem/isr"
)

// alternating is one Table made of several handles on the same storage
// (say two FileTables on one directory): each call goes to the next
// handle, so every read-after-write crosses handles.
type alternating struct {
	tables []isr.Table
	n      atomic.Uint64
}

func (a *alternating) next() isr.Table { return a.tables[a.n.Add(1)%uint64(len(a.tables))] }

func (a *alternating) GetMeta(ctx context.Context, pk string) (isr.Meta, error) {
	return a.next().GetMeta(ctx, pk)
}
func (a *alternating) GetLease(ctx context.Context, pk string) (isr.Lease, error) {
	return a.next().GetLease(ctx, pk)
}
func (a *alternating) GetRequest(ctx context.Context, pk, key string) (isr.Request, error) {
	return a.next().GetRequest(ctx, pk, key)
}
func (a *alternating) GetVersion(ctx context.Context, pk, id string) (isr.Version, error) {
	return a.next().GetVersion(ctx, pk, id)
}
func (a *alternating) AcquireLease(ctx context.Context, in isr.AcquireInput) (isr.Lease, error) {
	return a.next().AcquireLease(ctx, in)
}
func (a *alternating) RefreshLease(ctx context.Context, in isr.RefreshInput) (isr.Lease, error) {
	return a.next().RefreshLease(ctx, in)
}
func (a *alternating) ReleaseLease(ctx context.Context, l isr.Lease) error {
	return a.next().ReleaseLease(ctx, l)
}
func (a *alternating) Publish(ctx context.Context, in isr.PublishInput) error {
	return a.next().Publish(ctx, in)
}
func (a *alternating) PublishPointer(ctx context.Context, in isr.PublishPointerInput) (isr.Meta, error) {
	return a.next().PublishPointer(ctx, in)
}
func (a *alternating) BeginRequest(ctx context.Context, in isr.BeginRequestInput) (isr.Request, bool, error) {
	return a.next().BeginRequest(ctx, in)
}
func (a *alternating) FailRequest(ctx context.Context, pk, key, hash string) error {
	return a.next().FailRequest(ctx, pk, key, hash)
}
func (a *alternating) AbandonRequest(ctx context.Context, pk, key, hash string) error {
	return a.next().AbandonRequest(ctx, pk, key, hash)
}
