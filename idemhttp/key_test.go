package idemhttp_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/storekit"
)

func TestParseKey(t *testing.T) {
	good := map[string]string{
		`"8e03978e-40d5-43e8-bc93-6894a57f9324"`: "8e03978e-40d5-43e8-bc93-6894a57f9324",
		`8e03978e-40d5-43e8-bc93-6894a57f9324`:   "8e03978e-40d5-43e8-bc93-6894a57f9324",
		` "a b" `:                                "a b",
		`"a\"b\\c"`:                              `a"b\c`,
		`abc:def/ghi=+`:                          "abc:def/ghi=+",
		`"` + strings.Repeat("x", 255) + `"`:     strings.Repeat("x", 255),
		strings.Repeat("y", 255):                 strings.Repeat("y", 255),
	}
	for in, want := range good {
		got, err := idemhttp.ParseKey([]string{in})
		if err != nil || got != want {
			t.Errorf("ParseKey(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	bad := []string{``, ` `, `""`, `"abc`, `"ab"c`, `"a\x"`, `"a` + "\t" + `b"`, `"é"`, `a b`, `a,b`, `a;b`, `a"b`, `a\b`,
		"caf\xc3\xa9", `"abc";p=1`, `"abc", "def"`, strings.Repeat("z", 256), `"` + strings.Repeat("z", 256) + `"`}
	for _, in := range bad {
		got, err := idemhttp.ParseKey([]string{in})
		var ke *storekit.KeyError
		if !errors.As(err, &ke) || !errors.Is(err, idem.ErrInvalidKey) || errors.Is(err, idemhttp.ErrNoKey) {
			t.Errorf("ParseKey(%q) = %q, %v; want an *storekit.KeyError matching idem.ErrInvalidKey", in, got, err)
		}
	}
	if _, err := idemhttp.ParseKey([]string{"a", "b"}); !errors.Is(err, idem.ErrInvalidKey) {
		t.Errorf("two field lines: %v", err)
	}
	if _, err := idemhttp.ParseKey(nil); !errors.Is(err, idemhttp.ErrNoKey) || errors.Is(err, idem.ErrInvalidKey) {
		t.Errorf("no field line: %v, want ErrNoKey", err)
	}
}

func FuzzParseKey(f *testing.F) {
	for _, s := range []string{`"abc"`, `abc`, `"a\"b"`, `"`, `"\`, ``, `"abc";x`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		key, err := idemhttp.ParseKey([]string{s})
		if err != nil {
			var ke *storekit.KeyError
			if !errors.As(err, &ke) {
				t.Fatalf("error %v is not an *storekit.KeyError", err)
			}
			return
		}
		if key == "" || len(key) > idemhttp.MaxKeyLen {
			t.Fatalf("ParseKey(%q) = %q", s, key)
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x20 || key[i] > 0x7e {
				t.Fatalf("ParseKey(%q) = %q: not printable ASCII", s, key)
			}
		}
		// Quoting the key as a structured-field string gives it back.
		q := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(key) + `"`
		if k2, err := idemhttp.ParseKey([]string{q}); err != nil || k2 != key {
			t.Fatalf("round trip of %q via %q: %q, %v", key, q, k2, err)
		}
	})
}
