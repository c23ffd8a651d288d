package idemhttp_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/stores/storetest"
)

var benchHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	w.Write([]byte(`{"id":"pay_123","amount":100,"currency":"EUR"}`))
})

func benchServe(b *testing.B, h http.Handler, key func(i int) string) {
	body := `{"amount":100,"currency":"EUR","customer":"cus_1"}`
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		r := httptest.NewRequest("POST", "/payments", strings.NewReader(body))
		if k := key(i); k != "" {
			r.Header.Set("Idempotency-Key", k)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusCreated {
			b.Fatalf("status %d: %s", w.Code, w.Body)
		}
	}
}

// BenchmarkMiddleware compares a request through the middleware (memstore)
// with the bare handler: the difference is the middleware's overhead.
func BenchmarkMiddleware(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		benchServe(b, benchHandler, func(int) string { return "" })
	})
	b.Run("fresh", func(b *testing.B) {
		store := storetest.Instrument(mustMem())
		m, _ := idemhttp.New(store)
		benchServe(b, m.Handler(benchHandler), func(i int) string { return "k" + strconv.Itoa(i) })
		b.ReportMetric(float64(store.Total())/float64(b.N), "store-ops/op")
	})
	b.Run("replay", func(b *testing.B) {
		store := storetest.Instrument(mustMem())
		m, _ := idemhttp.New(store)
		h := m.Handler(benchHandler)
		r := httptest.NewRequest("POST", "/payments", strings.NewReader(`{"amount":100,"currency":"EUR","customer":"cus_1"}`))
		r.Header.Set("Idempotency-Key", "same")
		h.ServeHTTP(httptest.NewRecorder(), r) // the first request: every one timed is a replay
		store.Reset()
		benchServe(b, h, func(int) string { return "same" })
		b.ReportMetric(float64(store.Total())/float64(b.N), "store-ops/op")
	})
}
