package idemgrpc

import (
	"bytes"
	"testing"
)

// TestCodec: a record survives its encoding, and a malformed encoding is
// an error, never a panic or a guess.
func TestCodec(t *testing.T) {
	recs := []record{
		{Type: "a.B", Message: []byte{}},
		{Type: "a.B", Message: []byte("\x0a\x03abc"), Header: []pair{{"x-a", "1"}, {"x-a", ""}, {"x-bin-bin", "\x00\xff"}}, Trailer: []pair{{"x-t", "v"}}},
		{Status: []byte("\x08\x05\x12\x02no"), Trailer: []pair{{"x-t", "v"}}},
	}
	for _, r := range recs {
		b, err := codec{}.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var got record
		if err := (codec{}).Unmarshal(b, &got); err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		if got.Type != r.Type || !bytes.Equal(got.Message, r.Message) || !bytes.Equal(got.Status, r.Status) ||
			len(got.Header) != len(r.Header) || len(got.Trailer) != len(r.Trailer) || (r.Status == nil) != (got.Message != nil) {
			t.Errorf("round trip: %+v became %+v", r, got)
		}
		for i := range r.Header {
			if got.Header[i] != r.Header[i] {
				t.Errorf("header %d: %+v, want %+v", i, got.Header[i], r.Header[i])
			}
		}
		// Every truncation of a valid encoding is refused or decodes to
		// something valid; none panics.
		for i := 0; i < len(b); i++ {
			var x record
			_ = codec{}.Unmarshal(b[:i], &x)
		}
	}
	for _, bad := range []string{"", "\x08\x02", "\x08\x01", "\x08\x01\x12\x01a", "\x08\x01\x3a\x00", "\x08\x01\x22\x02\x08\x05\x1a\x00", "\x08\x01\x12\x01a\x1a\x00\x2a\x02\x12\x00", "\xff"} {
		var x record
		if err := (codec{}).Unmarshal([]byte(bad), &x); err == nil {
			t.Errorf("%q decoded to %+v", bad, x)
		}
	}
	if _, err := (codec{}).Marshal("not a record"); err == nil {
		t.Error("Marshal of a string: no error")
	}
	if err := (codec{}).Unmarshal([]byte("\x08\x01"), new(string)); err == nil {
		t.Error("Unmarshal into a string: no error")
	}
}
