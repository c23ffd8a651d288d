package isr_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/stores/storetest"
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

func newUnmadeArgs(t *testing.T) unmadeArgs {
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

// Every exported method of a table, Coordinator or Handler that its
// constructor did not make returns an error matching
// idem.ErrInvalidOption (or a zero result), never panics.
func TestUnmadeValues(t *testing.T) {
	a := newUnmadeArgs(t)
	ctx := context.Background()
	t.Run("DynamoTable", func(t *testing.T) {
		checkUnmade(t, func(tb *isr.DynamoTable) (map[string]func() error, map[string]func() any) {
			return tableCalls(a, tb), map[string]func() any{"Name": func() any { return tb.Name() }}
		})
	})
	t.Run("RedisTable", func(t *testing.T) {
		checkUnmade(t, func(tb *isr.RedisTable) (map[string]func() error, map[string]func() any) {
			return tableCalls(a, tb), map[string]func() any{"Key": func() any { return tb.Key(a.pk, isr.SKMeta) }}
		})
	})
	t.Run("FileTable", func(t *testing.T) {
		checkUnmade(t, func(tb *isr.FileTable) (map[string]func() error, map[string]func() any) {
			calls := tableCalls(a, tb)
			calls["Purge"] = func() error { _, err := tb.Purge(ctx); return err }
			return calls, map[string]func() any{
				"Dir":   func() any { return tb.Dir() },
				"Path":  func() any { return tb.Path(a.pk, isr.SKMeta) },
				"Close": func() any { return tb.Close() },
			}
		})
	})
	t.Run("MemoryTable", func(t *testing.T) {
		checkUnmade(t, func(tb *isr.MemoryTable) (map[string]func() error, map[string]func() any) {
			calls := tableCalls(a, tb)
			calls["Purge"] = func() error { _, err := tb.Purge(ctx); return err }
			return calls, map[string]func() any{
				"Requests": func() any { return tb.Requests() },
				"Len":      func() any { return tb.Len() },
				"Close":    func() any { return tb.Close() },
			}
		})
	})
	t.Run("Coordinator", func(t *testing.T) {
		render := func(context.Context, isr.Lease) (isr.Page, error) { return isr.Page{S3Key: "body"}, nil }
		checkUnmade(t, func(c *isr.Coordinator) (map[string]func() error, map[string]func() any) {
			return map[string]func() error{
					"Lookup":         func() error { _, err := c.Lookup(ctx, a.pk); return err },
					"TryAcquire":     func() error { _, err := c.TryAcquire(ctx, a.pk, nil); return err },
					"Refresh":        func() error { _, err := c.Refresh(ctx, a.lease); return err },
					"Release":        func() error { return c.Release(ctx, a.lease) },
					"Publish":        func() error { _, err := c.Publish(ctx, a.lease, isr.Page{S3Key: "body"}); return err },
					"Regenerate":     func() error { _, err := c.Regenerate(ctx, a.pk, nil, render); return err },
					"RegenerateFrom": func() error { _, err := c.RegenerateFrom(ctx, a.pk, nil, nil, render); return err },
				}, map[string]func() any{
					"Table": func() any { return c.Table() },
					"Now":   func() any { return c.Now() },
				}
		})
	})
	t.Run("Handler", func(t *testing.T) {
		checkUnmade(t, func(h *isr.Handler) (map[string]func() error, map[string]func() any) {
			return map[string]func() error{
					"Wait": func() error { return h.Wait(ctx) },
				}, map[string]func() any{
					// A zero value if the answer is a 500.
					"ServeHTTP": func() any {
						w := httptest.NewRecorder()
						h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
						return w.Code - http.StatusInternalServerError
					},
				}
		})
	})
}
