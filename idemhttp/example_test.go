package idemhttp_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/stores/memstore"
)

func Example() {
	charges := 0
	createPayment := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		charges++
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, `{"id":"pay_%d"}`, charges)
	})
	store, _ := memstore.New() // no options: cannot fail
	m, err := idemhttp.New(store,
		idemhttp.WithPrincipal(func(r *http.Request) (string, error) {
			if k := r.Header.Get("Authorization"); k != "" {
				return k, nil // in a real API: the account the credentials name
			}
			return "", errors.New("not authenticated")
		}),
		idemhttp.WithRequired(),
	)
	if err != nil {
		panic(err)
	}
	h := m.Handler(createPayment)

	send := func(key, body string) {
		r := httptest.NewRequest("POST", "/payments", strings.NewReader(body))
		r.Header.Set("Authorization", "Bearer sk_test_1")
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		b, _ := io.ReadAll(w.Body)
		fmt.Println(w.Code, w.Header().Get("Idempotent-Replayed"), strings.TrimSpace(string(b)))
	}
	send(`"k-1"`, `{"amount":100}`) // runs the handler
	send(`"k-1"`, `{"amount":100}`) // replays its response
	send(`"k-1"`, `{"amount":999}`) // same key, another request
	send("", `{"amount":100}`)      // no key
	fmt.Println("charges:", charges)
	// Output:
	// 201  {"id":"pay_1"}
	// 201 true {"id":"pay_1"}
	// 422  {"type":"https://pkg.go.dev/github.com/idem-go/idem/idemhttp#ProblemKeyReused","title":"Idempotency key reused","status":422,"detail":"This idempotency key was already used with a different request."}
	// 400  {"type":"https://pkg.go.dev/github.com/idem-go/idem/idemhttp#ProblemKeyMissing","title":"Idempotency key missing","status":400,"detail":"This operation requires the Idempotency-Key request header."}
	// charges: 1
}

// The headers that name one response are not replayed by default; a
// function given to WithReplayHeaders drops more (or keeps them).
func ExampleWithReplayHeaders() {
	createPayment := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "/payments/1")
		w.Header().Set("X-Request-Id", "req-1") // one response's: not replayed by default
		w.Header().Set("X-Served-By", "node-7") // dropped by the function below
		w.WriteHeader(http.StatusCreated)
	})
	store, _ := memstore.New() // no options: cannot fail
	m, err := idemhttp.New(store, idemhttp.WithReplayHeaders(func(name string) bool {
		return name != "X-Served-By" && idemhttp.DefaultReplayHeaders(name)
	}))
	if err != nil {
		panic(err)
	}
	h := m.Handler(createPayment)
	for range 2 {
		r := httptest.NewRequest("POST", "/payments", nil)
		r.Header.Set("Idempotency-Key", "k-1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("replayed=%q location=%q request-id=%q served-by=%q\n", w.Header().Get("Idempotent-Replayed"),
			w.Header().Get("Location"), w.Header().Get("X-Request-Id"), w.Header().Get("X-Served-By"))
	}
	// Output:
	// replayed="" location="/payments/1" request-id="req-1" served-by="node-7"
	// replayed="true" location="/payments/1" request-id="" served-by=""
}

// WithSkip leaves the requests it picks alone, whatever their method.
func ExampleWithSkip() {
	runs := 0
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs++
		w.WriteHeader(http.StatusAccepted)
	})
	store, _ := memstore.New() // no options: cannot fail
	m, err := idemhttp.New(store, idemhttp.WithRequired(), idemhttp.WithSkip(func(r *http.Request) bool {
		return r.Header.Get("X-Internal-Retry") != "" // a caller that deduplicates on its own
	}))
	if err != nil {
		panic(err)
	}
	for _, internal := range []string{"", "1", "1"} {
		r := httptest.NewRequest("POST", "/jobs", nil)
		r.Header.Set("X-Internal-Retry", internal)
		w := httptest.NewRecorder()
		m.Handler(h).ServeHTTP(w, r)
		fmt.Println(w.Code)
	}
	fmt.Println("runs:", runs)
	// Output:
	// 400
	// 202
	// 202
	// runs: 2
}
