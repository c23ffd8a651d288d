package storekit

import (
	"encoding/json"
	"fmt"
)

// RecordVersion is the version of the encoding EncodeRecord writes. A
// later encoding gets a new number, and DecodeRecord goes on reading this
// one.
const RecordVersion = 1

type recordJSON struct {
	V           int              `json:"v"`
	Key         string           `json:"key"`
	Status      Status           `json:"status"`
	Result      []byte           `json:"result,omitempty"`
	Error       *RecordedFailure `json:"error,omitempty"`
	PayloadHash string           `json:"payload_hash,omitempty"`
	Nonce       string           `json:"nonce"`
	Attempt     int64            `json:"attempt"`
	StartedAt   int64            `json:"started_at"`
	HeartbeatAt int64            `json:"heartbeat_at"`
	CompletedAt int64            `json:"completed_at,omitempty"`
	ExpiresAt   int64            `json:"expires_at"`
	TakeoverMs  int64            `json:"takeover_ms,omitempty"`
	Owner       string           `json:"owner,omitempty"`
}

// EncodeRecord encodes r as one versioned JSON document, for stores that
// keep a record as one blob (the file store; any key-value backend). It
// refuses a record that CheckRecord rejects. DecodeRecord reads
// it back.
func EncodeRecord(r *Record) ([]byte, error) {
	if r == nil {
		return nil, fmt.Errorf("storekit: encode record: nil record")
	}
	if err := CheckRecord(r); err != nil {
		return nil, fmt.Errorf("storekit: encode record: %w", err)
	}
	return json.Marshal(recordJSON{
		V: RecordVersion, Key: r.Key, Status: r.Status, Result: r.Result, Error: r.Error,
		PayloadHash: r.PayloadHash, Nonce: r.Nonce, Attempt: r.Attempt,
		StartedAt: r.StartedAt, HeartbeatAt: r.HeartbeatAt, CompletedAt: r.CompletedAt,
		ExpiresAt: r.ExpiresAt, TakeoverMs: r.TakeoverMs, Owner: r.Owner,
	})
}

// DecodeRecord decodes what EncodeRecord wrote. Anything else (truncated,
// an unknown version, a record that fails CheckRecord) is an
// *CorruptRecordError matching ErrCorruptRecord; it never panics.
// A store must report such a record, never overwrite it.
func DecodeRecord(b []byte) (*Record, error) {
	var j recordJSON
	if err := json.Unmarshal(b, &j); err != nil {
		return nil, &CorruptRecordError{Err: err}
	}
	if j.V != RecordVersion {
		return nil, &CorruptRecordError{Key: j.Key, Err: fmt.Errorf("unsupported record version %d", j.V)}
	}
	r := &Record{
		Key: j.Key, Status: j.Status, Result: j.Result, Error: j.Error,
		PayloadHash: j.PayloadHash, Nonce: j.Nonce, Attempt: j.Attempt,
		StartedAt: j.StartedAt, HeartbeatAt: j.HeartbeatAt, CompletedAt: j.CompletedAt,
		ExpiresAt: j.ExpiresAt, TakeoverMs: j.TakeoverMs, Owner: j.Owner,
	}
	if len(r.Result) == 0 {
		r.Result = nil // "result":"" and no result are one state
	}
	if err := CheckRecord(r); err != nil {
		return nil, &CorruptRecordError{Key: j.Key, Err: err}
	}
	return r, nil
}
