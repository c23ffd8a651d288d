package idem_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

func TestRecordRoundTrip(t *testing.T) {
	r := &idem.Record{
		Key: "idem:ab", Status: idem.StatusFailed, Result: []byte{0, 1, 2, 255},
		Error: &idem.StoredError{Message: "m", Type: "t"}, PayloadHash: "ph", Nonce: "n",
		Attempt: 3, StartedAt: 1, HeartbeatAt: 2, CompletedAt: 3, ExpiresAt: 4,
	}
	b, err := idem.EncodeRecord(r)
	require.NoError(t, err)
	got, err := idem.DecodeRecord(b)
	require.NoError(t, err)
	assert.Equal(t, r, got)
	_, err = idem.EncodeRecord(&idem.Record{Key: "k", Status: "weird", Nonce: "n", Attempt: 1})
	assert.Error(t, err)
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
		"array":     `[1,2,3]`,
		"binary":    "\x00\xff\xfe",
	} {
		_, err := idem.DecodeRecord([]byte(in))
		assert.ErrorIs(t, err, idem.ErrCorruptRecord, name)
		var ce *idem.CorruptRecordError
		assert.ErrorAs(t, err, &ce, name)
	}
}

// FuzzDecodeRecord: any bytes decode to a valid record or a corrupt-record
// error, never a panic, and a decoded record re-encodes to the same record.
func FuzzDecodeRecord(f *testing.F) {
	good, _ := idem.EncodeRecord(&idem.Record{Key: "idem:k", Status: idem.StatusCompleted, Result: []byte(`{"a":1}`), Nonce: "n", Attempt: 1, ExpiresAt: 9})
	f.Add(good)
	f.Add([]byte(`{"v":1}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := idem.DecodeRecord(b)
		if err != nil {
			require.ErrorIs(t, err, idem.ErrCorruptRecord)
			return
		}
		require.NoError(t, r.Validate())
		b2, err := idem.EncodeRecord(r)
		require.NoError(t, err)
		r2, err := idem.DecodeRecord(b2)
		require.NoError(t, err)
		require.Equal(t, r, r2)
	})
}
