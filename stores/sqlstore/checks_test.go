package sqlstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/sqlstore"
)

// TestInvalidRequests: calls no Guard makes (a claim without a nonce or
// with a zero threshold, a completion with an unknown status or a failure
// without its error, an empty key) get storekit's typed errors, and an
// empty nonce is idem.ErrLostOwnership, all before any statement is sent.
func TestInvalidRequests(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		e := newCountedEnv(t, d)
		s := e.store
		ctx := ctxT(t)
		key := storageKey()
		before := e.rt.Load()
		for name, r := range map[string]idem.ClaimRequest{
			"empty nonce":    {Key: key, LeaseTTL: time.Minute, TakeoverAfter: time.Second},
			"zero takeover":  {Key: key, Nonce: "n", LeaseTTL: time.Minute},
			"sub-ms lease":   {Key: key, Nonce: "n", LeaseTTL: time.Microsecond, TakeoverAfter: time.Second},
			"negative lease": {Key: key, Nonce: "n", LeaseTTL: -time.Second, TakeoverAfter: time.Second},
			"long nonce":     {Key: key, Nonce: randHex(sqlstore.MaxNonceLen), LeaseTTL: time.Minute, TakeoverAfter: time.Second},
		} {
			_, err := s.Claim(ctx, r)
			assert.ErrorIs(t, err, storekit.ErrInvalidRequest, name)
		}
		_, err := s.Claim(ctx, idem.ClaimRequest{Nonce: "n", LeaseTTL: time.Minute, TakeoverAfter: time.Second})
		assert.ErrorIs(t, err, idem.ErrInvalidKey)
		failed := &idem.RecordedFailure{Message: "m", Type: "t"}
		for name, c := range map[string]idem.Completion{
			"unknown status":     {Status: "done", TTL: time.Minute},
			"in_progress status": {Status: idem.StatusInProgress, TTL: time.Minute},
			"failure, no error":  {Status: idem.StatusFailed, TTL: time.Minute},
			"zero TTL":           {Status: idem.StatusFailed, Error: failed},
		} {
			assert.ErrorIs(t, s.Complete(ctx, key, "n", c), storekit.ErrInvalidRequest, name)
		}
		ok := idem.Completion{Status: idem.StatusCompleted, TTL: time.Minute}
		assert.ErrorIs(t, s.Heartbeat(ctx, key, "", time.Minute), idem.ErrLostOwnership)
		assert.ErrorIs(t, s.Complete(ctx, key, "", ok), idem.ErrLostOwnership)
		assert.ErrorIs(t, s.Release(ctx, key, ""), idem.ErrLostOwnership)
		assert.ErrorIs(t, s.Heartbeat(ctx, "", "n", time.Minute), idem.ErrInvalidKey)
		assert.ErrorIs(t, s.Complete(ctx, "", "n", ok), idem.ErrInvalidKey)
		assert.ErrorIs(t, s.Release(ctx, "", "n"), idem.ErrInvalidKey)
		_, err = s.Get(ctx, "")
		assert.ErrorIs(t, err, idem.ErrInvalidKey)
		assert.ErrorIs(t, s.Delete(ctx, ""), idem.ErrInvalidKey)
		assert.Equal(t, before, e.rt.Load(), "round trips to the database")
	})
}
