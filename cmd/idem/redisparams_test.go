package main

import (
	"context"
	"errors"
	"testing"
)

// TestRedisReplicationParams: the replication choice of a Redis store URL
// is parsed, and a bad value is a store configuration error, not a default.
func TestRedisReplicationParams(t *testing.T) {
	ctx := context.Background()
	for spec, ok := range map[string]bool{
		"redis://127.0.0.1:1/0?replica-ack=1":                           true,
		"redis://127.0.0.1:1/0?replica-ack=2&replica-ack-timeout=250ms": true,
		"redis://127.0.0.1:1/0?async-replication=accept":                true,
		"redis://127.0.0.1:1/0?replica-ack=x":                           false,
		"redis://127.0.0.1:1/0?replica-ack=0":                           false,
		"redis://127.0.0.1:1/0?replica-ack=1&replica-ack-timeout=soon":  false,
		"redis://127.0.0.1:1/0?async-replication=yes":                   false,
		"redis://127.0.0.1:1/0?replica-ack=1&async-replication=accept":  false,
	} {
		s, err := openStore(ctx, spec)
		if s != nil {
			_ = s.close()
		}
		var ce *StoreConfigError
		if ok && err != nil {
			t.Errorf("%s: %v", spec, err)
		}
		if !ok && !errors.As(err, &ce) {
			t.Errorf("%s: got %v, want a *StoreConfigError", spec, err)
		}
	}
}
