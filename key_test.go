package idem_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"regexp"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/jcs"
	"github.com/idem-go/idem/storekit"
)

func TestKeyCanonical(t *testing.T) {
	type args struct {
		B int    `json:"b"`
		A string `json:"a"`
	}
	k1, err := idem.Key("create_invoice", map[string]any{"a": "x", "b": 1})
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	k2, err := idem.Key("create_invoice", args{B: 1, A: "x"})
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if k2 != k1 {
		t.Errorf("a struct and a map with the same fields give the same key: got %v, want %v", k2, k1)
	}
	k3, err := idem.Key("create_invoice", map[string]any{"b": 1, "a": "x"})
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if k3 != k1 {
		t.Errorf("got %v, want %v", k3, k1)
	}
	k4, _ := idem.Key("create_invoice", map[string]any{"a": "x", "b": 2})
	if k4 == k1 {
		t.Errorf("got %v, want a different value", k4)
	}
	k5, _ := idem.Key("refund", map[string]any{"a": "x", "b": 1})
	if k5 == k1 {
		t.Errorf("got %v, want a different value", k5)
	}
	if !regexp.MustCompile(`^create_invoice:[0-9a-f]{64}$`).MatchString(k1) {
		t.Errorf("%q does not match %s", k1, `^create_invoice:[0-9a-f]{64}$`)
	}
	// Argument boundaries count: ("ab") is not ("a", "b").
	k6, _ := idem.Key("f", "ab")
	k7, _ := idem.Key("f", "a", "b")
	if k7 == k6 {
		t.Errorf("got %v, want a different value", k7)
	}
	// Stable across runs and processes: a fixed expectation.
	k8, err := idem.Key("create_invoice", 42, 1999)
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if k8 != "create_invoice:271eabe0f31d812d3db7b66479e281118c31a1bb9c0e4d62bee664f0801a4247" {
		t.Errorf("got %v, want %v", k8, "create_invoice:271eabe0f31d812d3db7b66479e281118c31a1bb9c0e4d62bee664f0801a4247")
	}
}

func TestKeyInvalid(t *testing.T) {
	type node struct {
		Next *node
	}
	cyc := &node{}
	cyc.Next = cyc
	cases := map[string][]any{
		"func":  {func() {}},
		"chan":  {make(chan int)},
		"cycle": {cyc},
		"nan":   {math.NaN()},
		"inf":   {math.Inf(1)},
		"cplx":  {complex(1, 2)},
	}
	for name, args := range cases {
		_, err := idem.Key("f", args...)
		if !errors.Is(err, idem.ErrInvalidKey) {
			t.Errorf("%v: got %v, want %v", name, err, idem.ErrInvalidKey)
		}
		var ke *storekit.KeyError
		if !errors.As(err, &ke) {
			t.Errorf("%v: got %v, want a %T", name, err, ke)
		}
	}
	_, err := idem.Key("")
	if !errors.Is(err, idem.ErrInvalidKey) {
		t.Errorf("got %v, want %v", err, idem.ErrInvalidKey)
	}
	_, err = idem.Key("bad\xff")
	if !errors.Is(err, idem.ErrInvalidKey) {
		t.Errorf("got %v, want %v", err, idem.ErrInvalidKey)
	}
}

// JSON turns every invalid UTF-8 byte into U+FFFD, so strings that differ
// only there would canonicalise alike and two different calls would share a
// key (or pass a payload check): they are refused instead.
func TestKeyInvalidUTF8(t *testing.T) {
	for name, arg := range map[string]any{
		"string":  "\xff",
		"map key": map[string]int{"a\xfe": 1},
		"nested":  []any{map[string]any{"x": "ok\xc3"}},
	} {
		_, err := idem.Key("f", arg)
		if !errors.Is(err, idem.ErrInvalidKey) {
			t.Errorf("%v: got %v, want %v", name, err, idem.ErrInvalidKey)
		}
	}
	k1, err := idem.Key("f", "\ufffd")
	if err != nil {
		t.Fatalf("a valid U+FFFD is fine: unexpected error: %v", err)
	}
	k2, err := idem.Key("f", `\ufffd`)
	if err != nil {
		t.Fatalf("so is a backslash followed by ufffd: unexpected error: %v", err)
	}
	if k2 == k1 {
		t.Errorf("got %v, want a different value", k2)
	}

	g, err := idem.New[int](newMem(t))
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	fn := func(ctx context.Context) (int, error) { return 1, nil }
	_, err = g.Do(context.Background(), "k", fn, idem.Payload("\xff"))
	if !errors.Is(err, idem.ErrInvalidPayload) {
		t.Errorf("got %v, want %v", err, idem.ErrInvalidPayload)
	}
	_, err = g.Do(context.Background(), "k", fn, idem.Payload("\ufffd"))
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
}

// FuzzKey checks that canonicalisation is deterministic and insensitive to
// map order and formatting: any JSON document, decoded and re-encoded in
// another shape, keys the same.
func FuzzKey(f *testing.F) {
	for _, s := range []string{`{"b":1,"a":[1,2,{"y":null,"x":true}]}`, `[]`, `"x"`, `1e3`, `{"\u00e9":"é"}`, `{"a":{"b":{"c":1.50}}}`} {
		f.Add("name", s)
	}
	f.Fuzz(func(t *testing.T, name, doc string) {
		var v any
		if json.Unmarshal([]byte(doc), &v) != nil {
			// Not JSON: Key must still not panic.
			_, _ = idem.Key(name, doc)
			return
		}
		k1, err1 := idem.Key(name, v)
		again, _ := json.MarshalIndent(v, "", "  ")
		var w any
		if err := json.Unmarshal(again, &w); err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		k2, err2 := idem.Key(name, w)
		if err1 != nil {
			if !errors.Is(err1, idem.ErrInvalidKey) {
				t.Fatalf("got %v, want %v", err1, idem.ErrInvalidKey)
			}
			if err2 == nil {
				t.Fatalf("got no error")
			}
			return
		}
		if err2 != nil {
			t.Fatalf("unexpected error: %v", err2)
		}
		if k2 != k1 {
			t.Fatalf("got %v, want %v", k2, k1)
		}
		c1, err := jcs.Marshal(v)
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		c2, err := jcs.Marshal(json.RawMessage(c1))
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		if string(c2) != string(c1) {
			t.Fatalf("canonical form is a fixed point: got %v, want %v", string(c2), string(c1))
		}
	})
}

// Key is RFC 8785 JSON: no HTML escaping, ECMAScript numbers, so another
// language derives the same key. The expectation is Node's
// sha256(JSON.stringify([{n:1e21,q:"a&b<c>",x:0.000001}])).
func TestKeyRFC8785(t *testing.T) {
	k, err := idem.Key("f", map[string]any{"q": "a&b<c>", "n": 1e21, "x": 0.000001})
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if k != "f:5594e58a4e1fac967770e24cf26b07f5bf97d599dc06ae8f194a5d9ae2a7ab2d" {
		t.Errorf("got %v, want %v", k, "f:5594e58a4e1fac967770e24cf26b07f5bf97d599dc06ae8f194a5d9ae2a7ab2d")
	}
	b, err := jcs.Marshal(map[string]any{"q": "a&b"})
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if string(b) != `{"q":"a&b"}` {
		t.Errorf("got %v, want %v", string(b), `{"q":"a&b"}`)
	}
	// Two int64 identifiers past 2^53 would share a double: refused.
	_, err = idem.Key("f", int64(9007199254740993))
	if !errors.Is(err, idem.ErrInvalidKey) {
		t.Errorf("got %v, want %v", err, idem.ErrInvalidKey)
	}
}
