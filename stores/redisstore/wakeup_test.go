package redisstore_test

import (
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNoLostWakeUp: a completion publishes only when a waiter marked the
// record, and a waiter is never left without its outcome, whenever the
// owner's completion lands: before the waiter's subscription, between the
// subscription and the mark, or after the mark. In every case either the
// watch channel is closed or the waiter's next look (a claim, as the Guard
// makes right after Watch returns) finds the outcome; after the mark it is
// the channel.
func TestNoLostWakeUp(t *testing.T) {
	bothKinds(t, func(t *testing.T, kind string) {
		for _, when := range []string{"before subscribe", "between subscribe and mark", "after mark"} {
			t.Run(when, func(t *testing.T) {
				ctx := ctxT(t)
				waiter, hook, owner := hookedPair(t, kind)

				key := storageKey()
				_, err := owner.Claim(ctx, claimReq(key, "owner"))
				require.NoError(t, err)
				res, err := waiter.Claim(ctx, claimReq(key, "waiter"))
				require.NoError(t, err)
				require.Equal(t, storekit.Existing, res.Outcome)

				complete := func() {
					require.NoError(t, owner.Complete(ctx, key, "owner",
						storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`1`), TTL: time.Hour}))
				}
				switch when {
				case "before subscribe":
					complete()
				case "between subscribe and mark":
					hook.arm(complete) // the mark is the first script Watch runs
				}
				ch, stop, err := waiter.Watch(ctx, key)
				require.NoError(t, err)
				defer stop()
				if when == "after mark" {
					complete()
					select {
					case <-ch:
					case <-ctx.Done():
						t.Fatal("a completion after the mark did not wake the waiter")
					}
					return
				}
				woken := false
				select {
				case <-ch:
					woken = true
				default:
				}
				res, err = waiter.Claim(ctx, claimReq(key, "waiter"))
				require.NoError(t, err)
				assert.True(t, woken || res.Record.Status == storekit.StatusCompleted,
					"neither woken nor the outcome found on the next look")
			})
		}
	})
}
