package isrtest

import (
	"context"
	"testing"
	"time"

	"github.com/idem-go/idem/isr"
)

// unmadeArgs are well-formed arguments for every Table method, so that
// only the receiver is wrong.
type unmadeArgs struct {
	pk      string
	lease   isr.Lease
	acquire isr.AcquireInput
	refresh isr.RefreshInput
	publish isr.PublishInput
	pointer isr.PublishPointerInput
	begin   isr.BeginRequestInput
}

func newUnmadeArgs(t testing.TB) unmadeArgs {
	pk, err := isr.PK("", "/unmade")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	exp := now.Unix() + 60
	lease := isr.Lease{PK: pk, Token: "token", ExpiresAt: exp, TTL: exp + 3600}
	return unmadeArgs{
		pk:      pk,
		lease:   lease,
		acquire: isr.AcquireInput{PK: pk, Token: "token", Now: now, ExpiresAt: exp, TTL: exp + 3600},
		refresh: isr.RefreshInput{Lease: lease, Now: now, ExpiresAt: exp, TTL: exp + 3600},
		publish: isr.PublishInput{Lease: lease, Now: now, Meta: isr.Meta{S3Key: "body", RevalidateSeconds: 60}},
		pointer: isr.PublishPointerInput{Lease: lease, Now: now, Version: isr.Version{ID: "v1", S3Key: "body"}, RevalidateSeconds: 60},
		begin:   isr.BeginRequestInput{PK: pk, Key: "req", Hash: "hash", Now: now, TTL: exp + 3600},
	}
}

// tableCalls are the Table methods called on tb.
func tableCalls(a unmadeArgs, tb isr.Table) map[string]func() error {
	ctx := context.Background()
	return map[string]func() error{
		"GetMeta":        func() error { _, err := tb.GetMeta(ctx, a.pk); return err },
		"GetLease":       func() error { _, err := tb.GetLease(ctx, a.pk); return err },
		"GetRequest":     func() error { _, err := tb.GetRequest(ctx, a.pk, "req"); return err },
		"GetVersion":     func() error { _, err := tb.GetVersion(ctx, a.pk, "v1"); return err },
		"AcquireLease":   func() error { _, err := tb.AcquireLease(ctx, a.acquire); return err },
		"RefreshLease":   func() error { _, err := tb.RefreshLease(ctx, a.refresh); return err },
		"ReleaseLease":   func() error { return tb.ReleaseLease(ctx, a.lease) },
		"Publish":        func() error { return tb.Publish(ctx, a.publish) },
		"PublishPointer": func() error { _, err := tb.PublishPointer(ctx, a.pointer); return err },
		"BeginRequest":   func() error { _, _, err := tb.BeginRequest(ctx, a.begin); return err },
		"FailRequest":    func() error { return tb.FailRequest(ctx, a.pk, "req", "hash") },
		"AbandonRequest": func() error { return tb.AbandonRequest(ctx, a.pk, "req", "hash") },
	}
}

// UnmadeCalls returns every Table method of tb, by name, called with
// well-formed arguments, so that only the receiver can be wrong: the cases
// for checking (with storetest.CheckUnmade) that a nil or zero table its
// constructor did not make returns an error matching
// idem.ErrInvalidOption and never panics.
func UnmadeCalls(t testing.TB, tb isr.Table) map[string]func() error {
	return tableCalls(newUnmadeArgs(t), tb)
}
