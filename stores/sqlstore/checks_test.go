package sqlstore_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/sqlstore"
)

// TestInvalidRequests: calls no Guard makes (a claim without a nonce or
// with a zero threshold, a completion with an unknown status or a failure
// without its error, an empty key) get storekit's typed errors, and an
// empty nonce is storekit.ErrLostOwnership, all before any statement is sent.
func TestInvalidRequests(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		e := newCountedEnv(t, d)
		s := e.store
		ctx := ctxT(t)
		key := storageKey()
		before := e.rt.Load()
		for name, r := range map[string]storekit.ClaimRequest{
			"empty nonce":    {Key: key, LeaseTTL: time.Minute, TakeoverAfter: time.Second},
			"zero takeover":  {Key: key, Nonce: "n", LeaseTTL: time.Minute},
			"sub-ms lease":   {Key: key, Nonce: "n", LeaseTTL: time.Microsecond, TakeoverAfter: time.Second},
			"negative lease": {Key: key, Nonce: "n", LeaseTTL: -time.Second, TakeoverAfter: time.Second},
			"long nonce":     {Key: key, Nonce: randHex(sqlstore.MaxNonceLen), LeaseTTL: time.Minute, TakeoverAfter: time.Second},
		} {
			_, err := s.Claim(ctx, r)
			assert.ErrorIs(t, err, storekit.ErrInvalidRequest, name)
		}
		_, err := s.Claim(ctx, storekit.ClaimRequest{Nonce: "n", LeaseTTL: time.Minute, TakeoverAfter: time.Second})
		assert.ErrorIs(t, err, storekit.ErrInvalidKey)
		failed := &storekit.RecordedFailure{Message: "m", Type: "t"}
		for name, c := range map[string]storekit.Completion{
			"unknown status":     {Status: "done", TTL: time.Minute},
			"in_progress status": {Status: storekit.StatusInProgress, TTL: time.Minute},
			"failure, no error":  {Status: storekit.StatusFailed, TTL: time.Minute},
			"zero TTL":           {Status: storekit.StatusFailed, Error: failed},
		} {
			assert.ErrorIs(t, s.Complete(ctx, key, "n", c), storekit.ErrInvalidRequest, name)
		}
		ok := storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Minute}
		assert.ErrorIs(t, s.Heartbeat(ctx, key, "", time.Minute), storekit.ErrLostOwnership)
		assert.ErrorIs(t, s.Complete(ctx, key, "", ok), storekit.ErrLostOwnership)
		assert.ErrorIs(t, s.Release(ctx, key, ""), storekit.ErrLostOwnership)
		assert.ErrorIs(t, s.Heartbeat(ctx, "", "n", time.Minute), storekit.ErrInvalidKey)
		assert.ErrorIs(t, s.Complete(ctx, "", "n", ok), storekit.ErrInvalidKey)
		assert.ErrorIs(t, s.Release(ctx, "", "n"), storekit.ErrInvalidKey)
		_, err = s.Get(ctx, "")
		assert.ErrorIs(t, err, storekit.ErrInvalidKey)
		assert.ErrorIs(t, s.Delete(ctx, ""), storekit.ErrInvalidKey)
		assert.Equal(t, before, e.rt.Load(), "round trips to the database")
	})
}
