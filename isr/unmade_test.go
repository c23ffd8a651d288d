package isr_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/isrtest"
	"github.com/idem-go/idem/stores/storetest"
)

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

// unmadePK is the cache key and a lease on it that the Coordinator's
// calls get.
func unmadePK(t *testing.T) (string, isr.Lease) {
	pk, err := isr.PK("", "/unmade")
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Unix() + 60
	return pk, isr.Lease{PK: pk, Token: "token", ExpiresAt: exp, TTL: exp + 3600}
}

// Every exported method of a table, Coordinator or Handler that its
// constructor did not make returns an error matching
// idem.ErrInvalidOption (or a zero result), never panics.
func TestUnmadeValues(t *testing.T) {
	pk, lease := unmadePK(t)
	ctx := context.Background()
	t.Run("FileTable", func(t *testing.T) {
		checkUnmade(t, func(tb *isr.FileTable) (map[string]func() error, map[string]func() any) {
			calls := isrtest.UnmadeCalls(t, tb)
			calls["Purge"] = func() error { _, err := tb.Purge(ctx); return err }
			return calls, map[string]func() any{
				"Dir":   func() any { return tb.Dir() },
				"Path":  func() any { return tb.Path(pk, isr.SKMeta) },
				"Close": func() any { return tb.Close() },
			}
		})
	})
	t.Run("MemoryTable", func(t *testing.T) {
		checkUnmade(t, func(tb *isr.MemoryTable) (map[string]func() error, map[string]func() any) {
			calls := isrtest.UnmadeCalls(t, tb)
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
					"Lookup":         func() error { _, err := c.Lookup(ctx, pk); return err },
					"TryAcquire":     func() error { _, err := c.TryAcquire(ctx, pk, nil); return err },
					"Refresh":        func() error { _, err := c.Refresh(ctx, lease); return err },
					"Release":        func() error { return c.Release(ctx, lease) },
					"Publish":        func() error { _, err := c.Publish(ctx, lease, isr.Page{S3Key: "body"}); return err },
					"Regenerate":     func() error { _, err := c.Regenerate(ctx, pk, nil, render); return err },
					"RegenerateFrom": func() error { _, err := c.RegenerateFrom(ctx, pk, nil, nil, render); return err },
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
