package redisstore

import (
	"errors"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"
)

// FuzzDecode: decode never panics; what it accepts is a valid record that
// encodes back to the same bytes (a fresh claim's relative times are made
// absolute from the key's expiry, so those are only checked for validity),
// and what it refuses is ErrCorruptRecord.
func FuzzDecode(f *testing.F) {
	const key = "idem:k"
	for _, r := range []*storekit.Record{
		{Key: key, Status: storekit.StatusInProgress, Nonce: "n", Attempt: 1, StartedAt: 1, HeartbeatAt: 1, ExpiresAt: 2, TakeoverMs: 30000, PayloadHash: "ph"},
		{Key: key, Status: storekit.StatusCompleted, Nonce: "n", Attempt: 3, Result: []byte(`{"a":1}`), CompletedAt: 5, ExpiresAt: 9},
		{Key: key, Status: storekit.StatusFailed, Nonce: "n", Attempt: 2, Error: &storekit.RecordedFailure{Message: "boom", Type: "T"}},
		{Key: key, Status: storekit.StatusCompleted, Nonce: "n", Attempt: 1, Result: []byte{}},
	} {
		v, err := encode(r)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(v, int64(-1))
	}
	fresh, err := claimValue(storekit.ClaimRequest{Key: key, Nonce: "n", PayloadHash: "ph", LeaseTTL: time.Minute, TakeoverAfter: time.Second}, time.Minute)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(fresh, int64(1795385591000))
	f.Add(fresh, int64(-1))
	f.Add("R2", int64(0))
	for _, r := range []string{"R2", "R3"} { // R2: another version, corrupt
		v, err := encode(&storekit.Record{Key: key, Status: storekit.StatusCompleted, Nonce: "n", Attempt: 3, Result: []byte(`1`), CompletedAt: 5, ExpiresAt: 9})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(r+v[2:], int64(-1))
		f.Add(r+v[2:3]+"9"+v[4:], int64(-1))   // watched
		f.Add(r+v[2:3]+"c"+v[4:], int64(1e12)) // watched and relative
	}
	owned, err := encode(&storekit.Record{Key: key, Status: storekit.StatusInProgress, Nonce: "n", Attempt: 2, StartedAt: 5, HeartbeatAt: 5, ExpiresAt: 9, Owner: "i/a/0123456789abcdef0123456789abcdef"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(owned, int64(-1))
	f.Add(owned[:len(owned)-1], int64(-1)) // the owner shorter than its length
	f.Add("", int64(0))
	f.Fuzz(func(t *testing.T, v string, pexpire int64) {
		r, err := decode(key, v, pexpire)
		if err != nil {
			if !errors.Is(err, storekit.ErrCorruptRecord) {
				t.Fatalf("error %v does not match ErrCorruptRecord", err)
			}
			return
		}
		if err := r.Validate(); err != nil {
			t.Fatalf("decoded an invalid record: %v", err)
		}
		flags, _ := flagsOf(v)
		if flags&flagRelative != 0 {
			return
		}
		back, err := encode(r)
		if err != nil {
			t.Fatalf("decoded record does not encode: %v", err)
		}
		// encode writes version 3 and no watched flag.
		if want := magic + v[2:3] + string(hexDigit(flags&^flagWatched)) + v[4:]; back != want {
			t.Fatalf("round trip changed the record:\n%q\n%q", v, back)
		}
	})
}
