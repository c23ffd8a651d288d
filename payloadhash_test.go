package idem

import (
	"strings"
	"testing"

	"github.com/idem-go/idem/jcs"
)

// TestPayloadHashStringShortcut checks that a string payload hashed without
// the JSON encoder gets the hash the encoder gives, for every printable
// ASCII character and for the strings that must take the encoder.
func TestPayloadHashStringShortcut(t *testing.T) {
	var all strings.Builder
	for c := byte(0x20); c < 0x7f; c++ {
		all.WriteByte(c)
	}
	cases := []string{"", "abc", "0123456789abcdef", "<a>&'b'", all.String(), strings.Repeat("x", 300),
		`say "hi"`, `back\slash`, "tab\t", "nul\x00", "del\x7f", "é", "\xff"}
	for c := byte(0x20); c < 0x7f; c++ {
		cases = append(cases, "k"+string(c)+"v")
	}
	for _, k := range []keyer{newKeyer("", "", nil), newKeyer("t", "s", []byte("secret"))} {
		for _, s := range cases {
			got, gerr := k.payloadHash(s)
			c, cerr := jcs.Marshal(s)
			if cerr != nil {
				if gerr == nil {
					t.Fatalf("%q: hashed, but the encoder refuses it: %v", s, cerr)
				}
				continue
			}
			b := appendField(nil, "idem/payload/v1")
			want := k.sum("", append(b, c...))
			if gerr != nil || got != want {
				t.Fatalf("%q: payloadHash = %q, %v; want %q (encoder)", s, got, gerr, want)
			}
		}
	}
}
