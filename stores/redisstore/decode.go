package redisstore

import (
	"fmt"
	"strconv"

	"github.com/idem-go/idem"
)

// recordVersion is the value of the v field this package writes and reads.
const recordVersion = "1"

// decode turns the field list of a record hash (HGETALL order: field, value,
// field, value...) into a Record. Anything missing, garbled or of an unknown
// version is an *idem.CorruptRecordError.
func decode(key string, v any) (*idem.Record, error) {
	corrupt := func(format string, args ...any) error {
		return &idem.CorruptRecordError{Key: key, Err: fmt.Errorf(format, args...)}
	}
	flat, ok := v.([]any)
	if !ok {
		return nil, corrupt("record is a %T, not a field list", v)
	}
	if len(flat)%2 != 0 {
		return nil, corrupt("odd field list length %d", len(flat))
	}
	m := make(map[string]string, len(flat)/2)
	for i := 0; i < len(flat); i += 2 {
		f, ok1 := flat[i].(string)
		val, ok2 := flat[i+1].(string)
		if !ok1 || !ok2 {
			return nil, corrupt("field %d is not a string", i/2)
		}
		m[f] = val
	}
	if ver, ok := m["v"]; !ok || ver != recordVersion {
		return nil, corrupt("unsupported record version %q", m["v"])
	}
	str := func(name string) (string, error) {
		s, ok := m[name]
		if !ok {
			return "", corrupt("missing field %s", name)
		}
		return s, nil
	}
	num := func(name string) (int64, error) {
		s, err := str(name)
		if err != nil {
			return 0, err
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, corrupt("field %s: %v", name, err)
		}
		return n, nil
	}
	r := &idem.Record{}
	var err error
	if r.Key, err = str("key"); err != nil {
		return nil, err
	}
	if r.Key != key {
		return nil, corrupt("record holds key %q", r.Key)
	}
	var status string
	if status, err = str("status"); err != nil {
		return nil, err
	}
	r.Status = idem.Status(status)
	if r.Nonce, err = str("nonce"); err != nil {
		return nil, err
	}
	r.PayloadHash = m["payload_hash"]
	for _, f := range []struct {
		name string
		dst  *int64
	}{
		{"attempt", &r.Attempt},
		{"started_at", &r.StartedAt},
		{"heartbeat_at", &r.HeartbeatAt},
		{"completed_at", &r.CompletedAt},
		{"expires_at", &r.ExpiresAt},
	} {
		if *f.dst, err = num(f.name); err != nil {
			return nil, err
		}
	}
	if res, ok := m["result"]; ok {
		r.Result = []byte(res)
	}
	if msg, ok := m["err_msg"]; ok {
		r.Error = &idem.StoredError{Message: msg, Type: m["err_type"]}
	} else if _, ok := m["err_type"]; ok {
		return nil, corrupt("err_type without err_msg")
	}
	if err := r.Validate(); err != nil {
		return nil, &idem.CorruptRecordError{Key: key, Err: err}
	}
	return r, nil
}
