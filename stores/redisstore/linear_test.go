package redisstore_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/stores/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// beforeScript is a go-redis hook that runs do once, right before the
// first script (EVALSHA or EVAL) the client sends after arm: what another
// client does between a claim's first command and its claim script.
type beforeScript struct {
	mu sync.Mutex
	do func()
}

func (b *beforeScript) arm(do func()) { b.mu.Lock(); b.do = do; b.mu.Unlock() }

func (b *beforeScript) DialHook(next redis.DialHook) redis.DialHook { return next }

func (b *beforeScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if n := strings.ToLower(cmd.Name()); n == "evalsha" || n == "eval" {
			b.mu.Lock()
			do := b.do
			b.do = nil
			b.mu.Unlock()
			if do != nil {
				do()
			}
		}
		return next(ctx, cmd)
	}
}

func (b *beforeScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// hookedPair returns two stores of kind on one fresh prefix, each on a
// client of its own: hooked, whose client runs hook's armed function right
// before its next script (its scripts loaded, so that function runs before
// the script itself, not before a script load), and other.
func hookedPair(t *testing.T, kind string) (hooked *redisstore.Store, hook *beforeScript, other *redisstore.Store) {
	t.Helper()
	c, _ := counted(t, kind)
	hook = &beforeScript{}
	c.AddHook(hook)
	oc, _ := counted(t, kind)
	pfx := prefix()
	hooked = mustNew(t, c, redisstore.WithPrefix(pfx))
	other = mustNew(t, oc, redisstore.WithPrefix(pfx))
	t.Cleanup(func() { _ = hooked.Close(); _ = other.Close() })
	require.NoError(t, hooked.LoadScripts(ctxT(t)))
	return hooked, hook, other
}

// TestClaimScriptAnswersItsOwnNonce reproduces a history that a
// linearizability check found illegal: a claim's first command sees a
// released record, so the claim goes on to the claim script; before the
// script runs, a claim with the same nonce (a retry of the same request
// from another connection) takes the key and its owner completes it. The
// script then finds a live completed record that carries the claim's own
// nonce: by the Store contract that is this claim, applied (Claimed), not
// another caller's record (Existing).
func TestClaimScriptAnswersItsOwnNonce(t *testing.T) {
	bothKinds(t, func(t *testing.T, kind string) {
		ctx := ctxT(t)
		s, hook, o := hookedPair(t, kind)

		key := storageKey()
		_, err := o.Claim(ctx, claimReq(key, "first"))
		require.NoError(t, err)
		require.NoError(t, o.Release(ctx, key, "first"))

		done := storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`1`), TTL: time.Hour}
		hook.arm(func() {
			res, err := o.Claim(ctx, claimReq(key, "same"))
			require.NoError(t, err)
			require.Equal(t, storekit.Claimed, res.Outcome)
			require.NoError(t, o.Complete(ctx, key, "same", done))
		})
		res, err := s.Claim(ctx, claimReq(key, "same"))
		require.NoError(t, err)
		assert.Equal(t, storekit.Claimed, res.Outcome, "the record carries this claim's nonce")
		assert.Equal(t, "same", res.Record.Nonce)
		assert.Equal(t, storekit.StatusCompleted, res.Record.Status)
		assert.EqualValues(t, 2, res.Record.Attempt)

		// Another nonce still gets the completed record as Existing.
		res, err = s.Claim(ctx, claimReq(key, "another"))
		require.NoError(t, err)
		assert.Equal(t, storekit.Existing, res.Outcome)
	})
}
