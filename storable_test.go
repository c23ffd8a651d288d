package idem

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzStorableString: whatever the input, a stored message is valid UTF-8
// without NUL, at most max bytes, and an input that already fits is kept.
func FuzzStorableString(f *testing.F) {
	f.Add("card\x00declined \xff", 8)
	f.Add(strings.Repeat("é", 300), 256)
	f.Add("", 1)
	f.Fuzz(func(t *testing.T, s string, max int) {
		if max < 4 || max > 1<<16 {
			return
		}
		got := storableString(s, max)
		if !utf8.ValidString(got) || strings.ContainsRune(got, 0) || len(got) > max {
			t.Fatalf("storableString(%q, %d) = %q", s, max, got)
		}
		if utf8.ValidString(s) && !strings.ContainsRune(s, 0) && len(s) <= max && got != s {
			t.Fatalf("storableString(%q, %d) changed a storable string to %q", s, max, got)
		}
	})
}
