package isr

import (
	"errors"
	"testing"
)

// FuzzDecodeItems feeds arbitrary attribute values to the item decoders: they
// must return a value or a *CorruptItemError, never panic.
func FuzzDecodeItems(f *testing.F) {
	f.Add("s3", "1700000000", "60", true, "STARTED")
	f.Add("", "1.5e9", "-1", false, "DONE")
	f.Add("k", "NaN", "1e400", true, "")
	f.Fuzz(func(t *testing.T, s, n1, n2 string, swap bool, status string) {
		gen := Attr{Type: TypeN, Value: n1}
		if swap {
			gen = Attr{Type: TypeS, Value: n1}
		}
		item := Item{
			"s3_key": sAttr(s), "generated_at": gen,
			"revalidate_seconds": {Type: TypeN, Value: n2}, "version": {Type: TypeN, Value: n2},
			"lease_token": sAttr(s), "lease_expires_at": gen, "ttl": {Type: TypeN, Value: n2},
			"request_hash": sAttr(s), "status": sAttr(status),
		}
		check := func(err error) {
			var ce *CorruptItemError
			if err != nil && (!errors.As(err, &ce) || !errors.Is(err, ErrCorruptItem)) {
				t.Fatalf("untyped error %v", err)
			}
		}
		_, err := decodeMeta("CACHE#x", item)
		check(err)
		_, err = DecodeLease("CACHE#x", item)
		check(err)
		_, err = decodeRequest("CACHE#x", "k", item)
		check(err)
		_, err = decodeVersion("CACHE#x", "v", item)
		check(err)
		_, err = decodeMetaLoose("CACHE#x", item)
		check(err)
	})
}
