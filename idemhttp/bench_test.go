package idemhttp_test

import (
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/stores/storetest"
)

var benchHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	w.Write([]byte(`{"id":"pay_123","amount":100,"currency":"EUR"}`))
})

func benchServe(b *testing.B, h http.Handler, key func(i int) string) {
	b.ReportAllocs()
	b.ResetTimer()
	serveN(b, h, key, b.N)
}

// serveN serves n requests through h and returns the time and allocations
// per request.
func serveN(b *testing.B, h http.Handler, key func(i int) string, n int) (ns, allocs float64) {
	body := `{"amount":100,"currency":"EUR","customer":"cus_1"}`
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	for i := 0; i < n; i++ {
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
	el := time.Since(start)
	runtime.ReadMemStats(&after)
	return float64(el.Nanoseconds()) / float64(n), float64(after.Mallocs-before.Mallocs) / float64(n)
}

// overBare reports what a request through the middleware costs over the
// bare handler: the same number of requests served by each, one after the
// other, after the benchmark's own loop.
func overBare(b *testing.B, h http.Handler, key func(i int) string) {
	b.StopTimer()
	n := max(b.N, 1000)
	mns, mallocs := serveN(b, h, func(i int) string { return key(b.N + i) }, n)
	bns, ballocs := serveN(b, benchHandler, func(int) string { return "" }, n)
	b.ReportMetric(mns-bns, "ns-over-bare/op")
	b.ReportMetric(mallocs-ballocs, "allocs-over-bare/op")
}

// BenchmarkMiddleware compares a request through the middleware (memstore)
// with the bare handler: the difference is the middleware's overhead,
// reported as ns-over-bare/op and allocs-over-bare/op.
func BenchmarkMiddleware(b *testing.B) {
	b.Run("bare", func(b *testing.B) {
		benchServe(b, benchHandler, func(int) string { return "" })
	})
	b.Run("fresh", func(b *testing.B) {
		store := storetest.Instrument(mustMem())
		m, _ := idemhttp.New(store)
		key := func(i int) string { return "k" + strconv.Itoa(i) }
		benchServe(b, m.Handler(benchHandler), key)
		b.ReportMetric(float64(store.Total())/float64(b.N), "store-ops/op")
		overBare(b, m.Handler(benchHandler), key)
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
		overBare(b, h, func(int) string { return "same" })
	})
}
