package redisstore_test

import (
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/stores/redisstore"
)

// TestCompleteFreshClaim completes a fresh claim with the conditional SET
// (the store remembers the claim's value), with the value forgotten, and
// with a wrong value remembered (both: the complete script): each writes the same record, with the claim's
// server-clock start and the completion's server-clock times, and a key
// that expires at its expires_at.
func TestCompleteFreshClaim(t *testing.T) {
	both(t, func(t *testing.T, c backend) {
		ctx := ctxT(t)
		s := newStore(t, c)
		for _, hint := range []string{"remembered", "forgotten", "wrong"} {
			t.Run(hint, func(t *testing.T) {
				key := storageKey()
				req := claimReq(key, "n-"+hint)
				req.PayloadHash = "ph"
				res, err := s.Claim(ctx, req)
				require.NoError(t, err)
				require.Equal(t, storekit.Claimed, res.Outcome)
				assert.True(t, s.RemembersFresh(req.Nonce))
				switch hint {
				case "forgotten":
					s.SetFresh(key, req.Nonce, "")
				case "wrong":
					other := req
					other.LeaseTTL = 2 * req.LeaseTTL
					v, err := redisstore.ClaimValue(other, redisstore.DefaultRetention)
					require.NoError(t, err)
					s.SetFresh(key, req.Nonce, v)
				}
				claimed, err := s.Get(ctx, key)
				require.NoError(t, err)

				done := storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`{"id":7}`), TTL: time.Hour}
				require.NoError(t, s.Complete(ctx, key, req.Nonce, done))
				assert.False(t, s.RemembersFresh(req.Nonce))
				got, err := s.Get(ctx, key)
				require.NoError(t, err)
				assert.Equal(t, storekit.StatusCompleted, got.Status)
				assert.Equal(t, []byte(`{"id":7}`), got.Result)
				assert.Nil(t, got.Error)
				assert.Equal(t, req.Nonce, got.Nonce)
				assert.Equal(t, "ph", got.PayloadHash)
				assert.EqualValues(t, 1, got.Attempt)
				assert.EqualValues(t, 5000, got.TakeoverMs)
				assert.Equal(t, claimed.StartedAt, got.StartedAt)
				assert.Equal(t, got.CompletedAt, got.HeartbeatAt)
				assert.GreaterOrEqual(t, got.CompletedAt, claimed.StartedAt)
				assert.EqualValues(t, time.Hour.Milliseconds(), got.ExpiresAt-got.CompletedAt)
				pet, err := c.PExpireTime(ctx, s.Key(key)).Result()
				require.NoError(t, err)
				assert.Equal(t, got.ExpiresAt, pet.Milliseconds())

				// A retry finds its own outcome (full path) and succeeds.
				require.NoError(t, s.Complete(ctx, key, req.Nonce, done))
			})
		}
	})
}

// TestCompleteFreshClaimOfAnother: a remembered value never lets a stale
// owner write over the claim that replaced its own.
func TestCompleteFreshClaimOfAnother(t *testing.T) {
	both(t, func(t *testing.T, c backend) {
		ctx := ctxT(t)
		pfx := redisstore.WithPrefix(prefix())
		a := mustNew(t, c, pfx)
		b := mustNew(t, c, pfx)
		key := storageKey()
		_, err := a.Claim(ctx, claimReq(key, "na"))
		require.NoError(t, err)
		require.NoError(t, a.Delete(ctx, key))
		res, err := b.Claim(ctx, claimReq(key, "nb"))
		require.NoError(t, err)
		require.Equal(t, storekit.Claimed, res.Outcome)
		assert.ErrorIs(t, a.Complete(ctx, key, "na", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Hour}), storekit.ErrLostOwnership)
		got, err := b.Get(ctx, key)
		require.NoError(t, err)
		assert.Equal(t, storekit.StatusInProgress, got.Status)
		assert.Equal(t, "nb", got.Nonce)
		require.NoError(t, b.Complete(ctx, key, "nb", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Hour}))
	})
}
