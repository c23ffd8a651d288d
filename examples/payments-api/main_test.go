package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestWalkThrough runs the server and does what README.md shows: a first
// request, its replay, a duplicate while the first runs (409), the key
// reused with another body (422), and the refusals without a key or a
// bearer token.
func TestWalkThrough(t *testing.T) {
	gate := make(chan struct{})
	addrc := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, config{addr: "127.0.0.1:0", dir: t.TempDir(), delay: time.Millisecond, gate: func(string) { <-gate },
			ready: func(a string) { addrc <- a }})
	}()
	var base string
	select {
	case a := <-addrc:
		base = "http://" + a
	case err := <-errc:
		t.Fatal(err)
	}
	defer func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("run: %v", err)
		}
	}()

	post := func(key, token, body string) (*http.Response, string) {
		t.Helper()
		r, _ := http.NewRequest("POST", base+"/payments", strings.NewReader(body))
		if key != "" {
			r.Header.Set("Idempotency-Key", key)
		}
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	stats := func() (charges, inFlight int) {
		resp, err := http.Get(base + "/stats")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var s struct {
			Charges  int `json:"charges"`
			InFlight int `json:"in_flight"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
			t.Fatal(err)
		}
		return s.Charges, s.InFlight
	}

	// 409: the first request is held at the gate while a duplicate arrives.
	type answer struct {
		resp *http.Response
		body string
	}
	first := make(chan answer)
	go func() {
		resp, body := post(`"order-1001"`, "sk_test_alice", `{"amount": 4200, "currency": "EUR"}`)
		first <- answer{resp, body}
	}()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, n := stats(); n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the first request never started")
		}
	}
	resp, body := post(`"order-1001"`, "sk_test_alice", `{"amount": 4200, "currency": "EUR"}`)
	if resp.StatusCode != http.StatusConflict || !strings.Contains(body, "ProblemInProgress") || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("duplicate in progress: %d %s", resp.StatusCode, body)
	}
	close(gate)
	a := <-first
	if a.resp.StatusCode != http.StatusCreated || a.resp.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("first: %d %v %s", a.resp.StatusCode, a.resp.Header, a.body)
	}

	// Replay: the same bytes, marked.
	resp, body = post(`"order-1001"`, "sk_test_alice", `{"amount": 4200, "currency": "EUR"}`)
	if resp.StatusCode != http.StatusCreated || body != a.body || resp.Header.Get("Idempotent-Replayed") != "true" ||
		resp.Header.Get("Location") != a.resp.Header.Get("Location") {
		t.Fatalf("replay: %d %v %s", resp.StatusCode, resp.Header, body)
	}
	// 422: the key reused for another amount.
	resp, body = post(`"order-1001"`, "sk_test_alice", `{"amount": 9900, "currency": "EUR"}`)
	if resp.StatusCode != http.StatusUnprocessableEntity || !strings.Contains(body, "ProblemKeyReused") {
		t.Fatalf("mismatch: %d %s", resp.StatusCode, body)
	}
	// Another customer's key space: the same key is a new payment.
	resp, body = post(`"order-1001"`, "sk_test_bob", `{"amount": 4200, "currency": "EUR"}`)
	if resp.StatusCode != http.StatusCreated || body == a.body || resp.Header.Get("Idempotent-Replayed") != "" {
		t.Fatalf("bob: %d %s", resp.StatusCode, body)
	}
	// 400 without a key, 401 without a token.
	if resp, body = post("", "sk_test_alice", `{"amount": 1, "currency": "EUR"}`); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("no key: %d %s", resp.StatusCode, body)
	}
	if resp, body = post(`"order-1002"`, "", `{"amount": 1, "currency": "EUR"}`); resp.StatusCode != http.StatusUnauthorized ||
		resp.Header.Get("WWW-Authenticate") == "" {
		t.Fatalf("no token: %d %s", resp.StatusCode, body)
	}
	if n, _ := stats(); n != 2 {
		t.Fatalf("charges = %d, want 2 (alice once, bob once)", n)
	}
}
