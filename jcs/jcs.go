// Package jcs encodes values as RFC 8785 JSON (the JSON Canonicalization
// Scheme), so that a hash over the bytes agrees across programs and
// languages:
//
//	b, err := jcs.Marshal(map[string]any{"b": 1.5, "a": []any{"x", true}})
//	// b is {"a":["x",true],"b":1.5}
//	sum := sha256.Sum256(b)
//	canon, err := jcs.Transform([]byte(`{"b": 1.50, "a": ["x", true]}`)) // the same bytes
//
// Object members are sorted by the UTF-16 code units of their names,
// strings escaped only where JSON requires it (no HTML escaping), and
// numbers written in the form of ECMAScript's Number.prototype.toString.
// Two programs in any language that follow RFC 8785 write the same bytes
// for the same value. A value with no canonical form (a NaN, a func, a
// cycle) is an error matching ErrInvalid.
//
// idem.Key, payload hashes and isr's RequestHash are built on it, so a
// program in another language can derive the same keys and hashes. It
// depends on the standard library only.
package jcs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/big"
	"sort"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrInvalid is matched by every error of Marshal and Transform.
var ErrInvalid = errors.New("jcs: value has no canonical JSON form")

func invalid(format string, args ...any) error {
	return fmt.Errorf("%s: %w", fmt.Sprintf(format, args...), ErrInvalid)
}

// Marshal encodes v with encoding/json (so struct tags and MarshalJSON
// methods apply) and returns its RFC 8785 form. A string that is not valid
// UTF-8 is an error (JSON would replace its bad bytes with U+FFFD and so make
// different values encode alike), as is a number no IEEE 754 double holds
// exactly when it is an integer (two integers past 2^53 would otherwise
// share a form), and anything encoding/json refuses (funcs, chans, cycles,
// NaN).
func Marshal(v any) ([]byte, error) {
	if s, ok := v.(string); ok {
		// A plain string (a fingerprint, a hash) needs no round trip
		// through encoding/json: its RFC 8785 form is AppendString's.
		if !utf8.ValidString(s) {
			return nil, invalid("a string is not valid UTF-8")
		}
		return AppendString(make([]byte, 0, len(s)+2), s), nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	if !utf8.Valid(b) || hasReplacementEscape(b) {
		return nil, invalid("a string is not valid UTF-8")
	}
	return Transform(b)
}

// Transform returns the RFC 8785 form of the JSON text b.
func Transform(b []byte) ([]byte, error) {
	if !utf8.Valid(b) {
		return nil, invalid("JSON text is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, invalid("%v", err)
	}
	if _, err := dec.Token(); err == nil {
		return nil, invalid("text after the JSON value")
	}
	out := make([]byte, 0, len(b))
	return appendValue(out, tree)
}

func appendValue(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case nil:
		return append(b, "null"...), nil
	case bool:
		if v {
			return append(b, "true"...), nil
		}
		return append(b, "false"...), nil
	case string:
		return AppendString(b, v), nil
	case json.Number:
		return appendNumber(b, string(v))
	case []any:
		b = append(b, '[')
		for i, e := range v {
			if i > 0 {
				b = append(b, ',')
			}
			var err error
			if b, err = appendValue(b, e); err != nil {
				return nil, err
			}
		}
		return append(b, ']'), nil
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Slice(keys, func(i, j int) bool { return lessUTF16(keys[i], keys[j]) })
		b = append(b, '{')
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = AppendString(b, k)
			b = append(b, ':')
			var err error
			if b, err = appendValue(b, v[k]); err != nil {
				return nil, err
			}
		}
		return append(b, '}'), nil
	}
	return nil, invalid("unexpected %T", v)
}

// lessUTF16 orders strings by their UTF-16 code units, as RFC 8785 sorts
// member names (this differs from byte order for characters past U+FFFF
// against U+E000..U+FFFF).
func lessUTF16(a, b string) bool {
	ua, ub := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	for i := 0; i < len(ua) && i < len(ub); i++ {
		if ua[i] != ub[i] {
			return ua[i] < ub[i]
		}
	}
	return len(ua) < len(ub)
}

// AppendString appends s as an RFC 8785 JSON string: '"' and '\\' escaped,
// control characters as \b \t \n \f \r or \u00xx, everything else as is.
func AppendString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c >= 0x20:
			b = append(b, c)
		case c == '\b':
			b = append(b, '\\', 'b')
		case c == '\t':
			b = append(b, '\\', 't')
		case c == '\n':
			b = append(b, '\\', 'n')
		case c == '\f':
			b = append(b, '\\', 'f')
		case c == '\r':
			b = append(b, '\\', 'r')
		default:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
	}
	return append(b, '"')
}

func appendNumber(b []byte, lit string) ([]byte, error) {
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		return nil, invalid("number %s is out of the range of a double", lit)
	}
	out := AppendFloat(b, f)
	if !strings.ContainsAny(lit, ".eE") {
		// An integer literal must name its double exactly (or be that
		// double's canonical text): two int64 identifiers past 2^53 must
		// not share a form.
		n, ok1 := new(big.Rat).SetString(lit)
		m, ok2 := new(big.Rat).SetString(string(out[len(b):]))
		exact, _ := new(big.Float).SetFloat64(f).Rat(nil)
		if !ok1 || !ok2 || (n.Cmp(m) != 0 && n.Cmp(exact) != 0) {
			return nil, invalid("integer %s has no exact double", lit)
		}
	}
	return out, nil
}

// AppendFloat appends f (finite) as ECMAScript's Number.prototype.toString
// writes it, the number form of RFC 8785.
func AppendFloat(b []byte, f float64) []byte {
	if f == 0 {
		return append(b, '0') // also -0
	}
	if f < 0 {
		b = append(b, '-')
		f = -f
	}
	// Shortest round-trip digits d1.d2...dk and exponent e: f = 0.d1..dk × 10^n, n = e+1.
	e := strconv.FormatFloat(f, 'e', -1, 64)
	mant, exp, _ := strings.Cut(e, "e")
	digits := strings.Replace(mant, ".", "", 1)
	x, _ := strconv.Atoi(exp)
	n, k := x+1, len(digits)
	switch {
	case k <= n && n <= 21:
		b = append(b, digits...)
		for i := 0; i < n-k; i++ {
			b = append(b, '0')
		}
	case 0 < n && n <= 21:
		b = append(b, digits[:n]...)
		b = append(b, '.')
		b = append(b, digits[n:]...)
	case -6 < n && n <= 0:
		b = append(b, '0', '.')
		for i := 0; i < -n; i++ {
			b = append(b, '0')
		}
		b = append(b, digits...)
	default:
		b = append(b, digits[0])
		if k > 1 {
			b = append(b, '.')
			b = append(b, digits[1:]...)
		}
		b = append(b, 'e')
		if n-1 >= 0 {
			b = append(b, '+')
		}
		b = strconv.AppendInt(b, int64(n-1), 10)
	}
	return b
}

// hasReplacementEscape reports whether the JSON text b holds the escape
// \ufffd, which encoding/json writes for each invalid byte of a string (a
// valid U+FFFD it writes as is).
func hasReplacementEscape(b []byte) bool {
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			continue
		}
		if b[i+1] == 'u' && i+6 <= len(b) && bytes.EqualFold(b[i+2:i+6], []byte("fffd")) {
			return true
		}
		i++ // skip the escaped character, so \\ufffd is not taken for one
	}
	return false
}
