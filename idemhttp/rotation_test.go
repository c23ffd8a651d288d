package idemhttp_test

import (
	"net/http"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemhttp"
)

// TestRotationReplay: a response recorded by a middleware keyed with the
// old secret is replayed, byte for byte, by one rotated to (new, old)
// through WithGuard, without running the handler again; a request with
// the same key and another body is still refused as a reuse; and a new key
// runs once under the new secret.
func TestRotationReplay(t *testing.T) {
	store := mustMem()
	oldSecret, newSecret := []byte("idemhttp-old-secret"), []byte("idemhttp-new-secret")
	h := &counter{}
	before := newMW(t, store, idemhttp.WithGuard(idem.WithSecret(oldSecret))).Handler(h)
	after := newMW(t, store, idemhttp.WithGuard(idem.WithSecret(newSecret, oldSecret))).Handler(h)

	first := do(before, req{key: `"pay-1"`, body: `{"amount":10}`})
	if first.Code != http.StatusCreated {
		t.Fatalf("first: %d %s", first.Code, first.Body)
	}
	replay := do(after, req{key: `"pay-1"`, body: `{"amount":10}`})
	if replay.Code != first.Code || replay.Body.String() != first.Body.String() {
		t.Fatalf("after the rotation: %d %s; want the recorded %d %s", replay.Code, replay.Body, first.Code, first.Body)
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("handler ran %d times, want 1", n)
	}
	other := do(after, req{key: `"pay-1"`, body: `{"amount":99}`})
	if other.Code != http.StatusUnprocessableEntity {
		t.Errorf("same key, other body after the rotation: %d %s, want 422", other.Code, other.Body)
	}
	fresh := do(after, req{key: `"pay-2"`, body: `{"amount":5}`})
	again := do(after, req{key: `"pay-2"`, body: `{"amount":5}`})
	if fresh.Code != http.StatusCreated || again.Body.String() != fresh.Body.String() {
		t.Errorf("new key: %d %s, then %d %s", fresh.Code, fresh.Body, again.Code, again.Body)
	}
	if n := h.runs.Load(); n != 2 {
		t.Errorf("handler ran %d times, want 2", n)
	}
}
