package sqlstore

import (
	"database/sql"
	"errors"
	"fmt"

	"github.com/idem-go/idem/storekit"
)

// encodingVersion is the record_version this package writes and reads.
const encodingVersion = 1

// rawRecord is a row as scanned, before it is checked.
type rawRecord struct {
	version     int64
	nonce       string
	status      string
	attempt     int64
	payloadHash string
	result      []byte
	errMessage  sql.NullString
	errType     sql.NullString
	startedAt   int64
	heartbeatAt int64
	completedAt int64
	expiresAt   int64
	takenOverAt int64
	takeoverMs  int64
	owner       string
}

// dest returns scan destinations in the order of cols.
func (r *rawRecord) dest() []any {
	return []any{&r.version, &r.nonce, &r.status, &r.attempt, &r.payloadHash, &r.result,
		&r.errMessage, &r.errType, &r.startedAt, &r.heartbeatAt, &r.completedAt, &r.expiresAt, &r.takenOverAt, &r.takeoverMs, &r.owner}
}

// record checks the row strictly: an unknown record_version or status, an
// empty nonce, an attempt below 1, a failed row without an error message or
// an error type without a message is a *storekit.CorruptRecordError.
func (r *rawRecord) record(key string) (*storekit.Record, error) {
	corrupt := func(err error) error { return &storekit.CorruptRecordError{Key: key, Err: err} }
	if r.version != encodingVersion {
		return nil, corrupt(fmt.Errorf("unsupported record_version %d", r.version))
	}
	if r.errType.Valid && !r.errMessage.Valid {
		return nil, corrupt(errors.New("error_type without error_message"))
	}
	rec := &storekit.Record{
		Key: key, Status: storekit.Status(r.status), PayloadHash: r.payloadHash, Nonce: r.nonce,
		Attempt: r.attempt, StartedAt: r.startedAt, HeartbeatAt: r.heartbeatAt,
		CompletedAt: r.completedAt, ExpiresAt: r.expiresAt, TakeoverMs: r.takeoverMs, Owner: r.owner,
	}
	if len(r.result) > 0 {
		rec.Result = r.result
	}
	if r.errMessage.Valid {
		rec.Error = &storekit.RecordedFailure{Message: r.errMessage.String, Type: r.errType.String}
	}
	if err := storekit.CheckRecord(rec); err != nil {
		return nil, corrupt(err)
	}
	return rec, nil
}
