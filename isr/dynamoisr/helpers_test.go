package dynamoisr_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/body"
	"github.com/idem-go/idem/isr/dynamoisr"
)

func mustDynamoTable(t testing.TB, client dynamoisr.Client, table string) *dynamoisr.Table {
	t.Helper()
	tb, err := dynamoisr.NewTable(client, table)
	if err != nil {
		t.Fatalf("NewTable: %v", err)
	}
	return tb
}

// fakeDynamo is a Client for tests that send no request.
type fakeDynamo struct{ dynamoisr.Client }

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

type response struct {
	code  int
	hdr   http.Header
	body  string
	cache string
}

func get(h http.Handler, path string, hdr ...string) response {
	r := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	res := w.Result()
	b, _ := io.ReadAll(res.Body)
	return response{code: res.StatusCode, hdr: res.Header, body: string(b), cache: res.Header.Get(isr.HeaderCache)}
}
