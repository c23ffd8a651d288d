package idem_test

import (
	"context"
	"encoding/json"
	"math"
	"testing"

	"github.com/idem-go/idem/internal/assert"
	"github.com/idem-go/idem/internal/require"

	"github.com/idem-go/idem"
)

func TestKeyCanonical(t *testing.T) {
	type args struct {
		B int    `json:"b"`
		A string `json:"a"`
	}
	k1, err := idem.Key("create_invoice", map[string]any{"a": "x", "b": 1})
	require.NoError(t, err)
	k2, err := idem.Key("create_invoice", args{B: 1, A: "x"})
	require.NoError(t, err)
	assert.Equal(t, k1, k2, "a struct and a map with the same fields give the same key")
	k3, err := idem.Key("create_invoice", map[string]any{"b": 1, "a": "x"})
	require.NoError(t, err)
	assert.Equal(t, k1, k3)
	k4, _ := idem.Key("create_invoice", map[string]any{"a": "x", "b": 2})
	assert.NotEqual(t, k1, k4)
	k5, _ := idem.Key("refund", map[string]any{"a": "x", "b": 1})
	assert.NotEqual(t, k1, k5)
	assert.Regexp(t, `^create_invoice:[0-9a-f]{64}$`, k1)
	// Argument boundaries count: ("ab") is not ("a", "b").
	k6, _ := idem.Key("f", "ab")
	k7, _ := idem.Key("f", "a", "b")
	assert.NotEqual(t, k6, k7)
	// Stable across runs and processes: a fixed expectation.
	k8, err := idem.Key("create_invoice", 42, 1999)
	require.NoError(t, err)
	assert.Equal(t, "create_invoice:271eabe0f31d812d3db7b66479e281118c31a1bb9c0e4d62bee664f0801a4247", k8)
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
		assert.ErrorIs(t, err, idem.ErrInvalidKey, name)
		var ke *idem.KeyError
		assert.ErrorAs(t, err, &ke, name)
	}
	_, err := idem.Key("")
	assert.ErrorIs(t, err, idem.ErrInvalidKey)
	_, err = idem.Key("bad\xff")
	assert.ErrorIs(t, err, idem.ErrInvalidKey)
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
		assert.ErrorIs(t, err, idem.ErrInvalidKey, name)
	}
	k1, err := idem.Key("f", "\ufffd")
	require.NoError(t, err, "a valid U+FFFD is fine")
	k2, err := idem.Key("f", `\ufffd`)
	require.NoError(t, err, "so is a backslash followed by ufffd")
	assert.NotEqual(t, k1, k2)

	g, err := idem.New[int](newMem(t))
	require.NoError(t, err)
	fn := func(ctx context.Context) (int, error) { return 1, nil }
	_, err = g.Do(context.Background(), "k", fn, idem.Payload("\xff"))
	assert.ErrorIs(t, err, idem.ErrInvalidPayload)
	_, err = g.Do(context.Background(), "k", fn, idem.Payload("\ufffd"))
	require.NoError(t, err)
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
		require.NoError(t, json.Unmarshal(again, &w))
		k2, err2 := idem.Key(name, w)
		if err1 != nil {
			require.ErrorIs(t, err1, idem.ErrInvalidKey)
			require.Error(t, err2)
			return
		}
		require.NoError(t, err2)
		require.Equal(t, k1, k2)
		c1, err := idem.CanonicalJSON(v)
		require.NoError(t, err)
		c2, err := idem.CanonicalJSON(json.RawMessage(c1))
		require.NoError(t, err)
		require.Equal(t, string(c1), string(c2), "canonical form is a fixed point")
	})
}

// Key is RFC 8785 JSON: no HTML escaping, ECMAScript numbers, so another
// language derives the same key. The expectation is Node's
// sha256(JSON.stringify([{n:1e21,q:"a&b<c>",x:0.000001}])).
func TestKeyRFC8785(t *testing.T) {
	k, err := idem.Key("f", map[string]any{"q": "a&b<c>", "n": 1e21, "x": 0.000001})
	require.NoError(t, err)
	assert.Equal(t, "f:5594e58a4e1fac967770e24cf26b07f5bf97d599dc06ae8f194a5d9ae2a7ab2d", k)
	b, err := idem.CanonicalJSON(map[string]any{"q": "a&b"})
	require.NoError(t, err)
	assert.Equal(t, `{"q":"a&b"}`, string(b))
	// Two int64 identifiers past 2^53 would share a double: refused.
	_, err = idem.Key("f", int64(9007199254740993))
	assert.ErrorIs(t, err, idem.ErrInvalidKey)
}
