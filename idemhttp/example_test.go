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
