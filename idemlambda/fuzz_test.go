package idemlambda_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemlambda"
	"github.com/idem-go/idem/stores/memstore"
)

// FuzzKeyPath: any expression and any JSON event give a key, a typed
// error or an option error, never a panic: an expression that does not
// compile is refused by Wrap (idem.ErrInvalidOption), and one that finds
// no key in the event is *NoKeyError (ErrNoKey). The Powertools functions
// are in the seeds, with events whose strings are not JSON, base64 or gzip.
// (One store serves every input, so a key met again with another event is
// ErrPayloadMismatch.)
func FuzzKeyPath(f *testing.F) {
	for _, s := range [][2]string{
		{"order_id", `{"order_id":"o-1"}`},
		{"[amount, currency]", `{"amount":5,"currency":"EUR"}`},
		{"powertools_json(body).id", `{"body":"{\"id\":\"x\"}"}`},
		{"powertools_json(body).id", `{"body":"not json"}`},
		{"powertools_base64(data)", `{"data":"aGVsbG8="}`},
		{"powertools_base64(data)", `{"data":"%%%"}`},
		{"powertools_base64_gzip(data)", `{"data":"aGVsbG8="}`},
		{"records[0].messageId", `{"records":[]}`},
		{"a.b.c | [0]", `[1,2,3]`},
		{"`null`", `{}`},
		{"[[", `{}`},
	} {
		f.Add(s[0], s[1])
	}
	store, err := memstore.New()
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, expr, event string) {
		var ev json.RawMessage
		if json.Unmarshal([]byte(event), &ev) != nil {
			return // Lambda hands a handler JSON only
		}
		h, err := idemlambda.Wrap(store, func(context.Context, json.RawMessage) (int, error) { return 1, nil },
			idemlambda.WithKeyPath(expr))
		if err != nil {
			if !errors.Is(err, idem.ErrInvalidOption) {
				t.Fatalf("Wrap(%q) = %v, want an error matching ErrInvalidOption", expr, err)
			}
			return
		}
		if _, err := h(context.Background(), ev); err != nil {
			var nk *idemlambda.NoKeyError
			if !errors.As(err, &nk) && !errors.Is(err, idem.ErrInvalidKey) && !errors.Is(err, idem.ErrPayloadMismatch) {
				t.Fatalf("expression %q on %s: %v, want a key, *NoKeyError or ErrInvalidKey", expr, event, err)
			}
		}
	})
}
