package storekit_test

import (
	"errors"
	"reflect"
	"testing"

	"github.com/idem-go/idem/storekit"
)

func TestRecordRoundTrip(t *testing.T) {
	r := &storekit.Record{
		Key: "idem:ab", Status: storekit.StatusFailed, Result: []byte{0, 1, 2, 255},
		Error: &storekit.RecordedFailure{Message: "m", Type: "t"}, PayloadHash: "ph", Nonce: "n",
		Attempt: 3, StartedAt: 1, HeartbeatAt: 2, CompletedAt: 3, ExpiresAt: 4, TakeoverMs: 30000,
	}
	b, err := storekit.EncodeRecord(r)
	if err != nil {
		t.Fatal(err)
	}
	got, err := storekit.DecodeRecord(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(r, got) {
		t.Fatalf("round trip: got %+v, want %+v", got, r)
	}
	if _, err := storekit.EncodeRecord(&storekit.Record{Key: "k", Status: "weird", Nonce: "n", Attempt: 1}); err == nil {
		t.Fatal("encoding an invalid record succeeded")
	}
	if _, err := storekit.EncodeRecord(nil); err == nil {
		t.Fatal("encoding nil succeeded")
	}
}

func TestRecordDecodeCorrupt(t *testing.T) {
	for name, in := range map[string]string{
		"empty":     ``,
		"truncated": `{"v":1,"key":"k","status":"completed"`,
		"version":   `{"v":99,"key":"k","status":"completed","nonce":"n","attempt":1}`,
		"status":    `{"v":1,"key":"k","status":"done","nonce":"n","attempt":1}`,
		"nonce":     `{"v":1,"key":"k","status":"completed","attempt":1}`,
		"attempt":   `{"v":1,"key":"k","status":"completed","nonce":"n","attempt":0}`,
		"failed":    `{"v":1,"key":"k","status":"failed","nonce":"n","attempt":1}`,
		"types":     `{"v":1,"key":"k","status":"completed","nonce":"n","attempt":"1"}`,
		"result":    `{"v":1,"key":"k","status":"completed","nonce":"n","attempt":1,"result":"%%%"}`,
		"takeover":  `{"v":1,"key":"k","status":"completed","nonce":"n","attempt":1,"takeover_ms":-1}`,
		"array":     `[1,2,3]`,
		"binary":    "\x00\xff\xfe",
	} {
		_, err := storekit.DecodeRecord([]byte(in))
		if !errors.Is(err, storekit.ErrCorruptRecord) {
			t.Errorf("%s: got %v, want ErrCorruptRecord", name, err)
		}
		var ce *storekit.CorruptRecordError
		if !errors.As(err, &ce) {
			t.Errorf("%s: got %T, want *storekit.CorruptRecordError", name, err)
		}
	}
}

// FuzzDecodeRecord: any bytes decode to a valid record or a corrupt-record
// error, never a panic, and a decoded record re-encodes to the same record.
func FuzzDecodeRecord(f *testing.F) {
	good, _ := storekit.EncodeRecord(&storekit.Record{Key: "idem:k", Status: storekit.StatusCompleted, Result: []byte(`{"a":1}`), Nonce: "n", Attempt: 1, ExpiresAt: 9, TakeoverMs: 5})
	f.Add(good)
	f.Add([]byte(`{"v":1}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := storekit.DecodeRecord(b)
		if err != nil {
			if !errors.Is(err, storekit.ErrCorruptRecord) {
				t.Fatalf("error %v does not match ErrCorruptRecord", err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatal(err)
		}
		b2, err := storekit.EncodeRecord(r)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := storekit.DecodeRecord(b2)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(r, r2) {
			t.Fatalf("re-encoded record differs: %+v vs %+v", r, r2)
		}
	})
}
