package redisstore_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem"
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

		done := idem.Completion{Status: idem.StatusCompleted, Result: []byte(`1`), TTL: time.Hour}
		hook.arm(func() {
			res, err := o.Claim(ctx, claimReq(key, "same"))
			require.NoError(t, err)
			require.Equal(t, idem.Claimed, res.Outcome)
			require.NoError(t, o.Complete(ctx, key, "same", done))
		})
		res, err := s.Claim(ctx, claimReq(key, "same"))
		require.NoError(t, err)
		assert.Equal(t, idem.Claimed, res.Outcome, "the record carries this claim's nonce")
		assert.Equal(t, "same", res.Record.Nonce)
		assert.Equal(t, idem.StatusCompleted, res.Record.Status)
		assert.EqualValues(t, 2, res.Record.Attempt)

		// Another nonce still gets the completed record as Existing.
		res, err = s.Claim(ctx, claimReq(key, "another"))
		require.NoError(t, err)
		assert.Equal(t, idem.Existing, res.Outcome)
	})
}

// TestVersion2Records: records the previous encoding wrote (R2, kept a
// retention past their expires_at) still decode and answer: a live
// completed one is replayed, an expired one that is still present is
// claimed again with the attempt count going on (the claim script decides
// with the server's clock, since a present version-2 record may be
// expired), and an in-progress one is taken over when stale.
func TestVersion2Records(t *testing.T) {
	both(t, func(t *testing.T, c backend) {
		ctx := ctxT(t)
		s := newStore(t, c)
		now := time.Now().UnixMilli()
		put := func(r *idem.Record, px time.Duration) {
			v, err := redisstore.Encode(r)
			require.NoError(t, err)
			require.NoError(t, c.Set(ctx, s.Key(r.Key), "R2"+v[2:], px).Err())
		}
		live := &idem.Record{Key: storageKey(), Status: idem.StatusCompleted, Nonce: "old", Attempt: 3,
			Result: []byte(`"v2"`), StartedAt: now - 10, HeartbeatAt: now - 5, CompletedAt: now - 5, ExpiresAt: now + 3_600_000}
		put(live, 2*time.Hour)
		res, err := s.Claim(ctx, claimReq(live.Key, "new"))
		require.NoError(t, err)
		assert.Equal(t, idem.Existing, res.Outcome)
		assert.Equal(t, live, res.Record)
		got, err := s.Get(ctx, live.Key)
		require.NoError(t, err)
		assert.Equal(t, live, got)

		expired := &idem.Record{Key: storageKey(), Status: idem.StatusCompleted, Nonce: "old", Attempt: 3,
			Result: []byte(`"v2"`), StartedAt: now - 10_000, HeartbeatAt: now - 9_000, CompletedAt: now - 9_000, ExpiresAt: now - 5_000}
		put(expired, time.Minute)
		_, err = s.Get(ctx, expired.Key)
		assert.ErrorIs(t, err, idem.ErrNotFound)
		res, err = s.Claim(ctx, claimReq(expired.Key, "new"))
		require.NoError(t, err)
		assert.Equal(t, idem.Claimed, res.Outcome)
		assert.EqualValues(t, 4, res.Record.Attempt)

		stale := &idem.Record{Key: storageKey(), Status: idem.StatusInProgress, Nonce: "old", Attempt: 1,
			StartedAt: now - 10_000, HeartbeatAt: now - 10_000, ExpiresAt: now + 60_000, TakeoverMs: 1000}
		put(stale, 2*time.Minute)
		res, err = s.Claim(ctx, claimReq(stale.Key, "new"))
		require.NoError(t, err)
		assert.Equal(t, idem.TookOver, res.Outcome)
		assert.EqualValues(t, 2, res.Record.Attempt)
		require.NoError(t, s.Complete(ctx, stale.Key, "new", idem.Completion{Status: idem.StatusCompleted, Result: []byte(`1`), TTL: time.Hour}))
		v, err := c.Get(ctx, s.Key(stale.Key)).Result()
		require.NoError(t, err)
		assert.Equal(t, "R3", v[:2], "every write makes version 3")
	})
}
