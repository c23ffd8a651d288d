package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNotRecordedOnlyWhenTrue: the completion request is held by the
// network past the claim's takeover threshold (plus 300ms) and then
// delivered. Whatever the Guard answers, it never says ErrNotRecorded when
// the record ends completed, with go-redis's ContextTimeoutEnabled on (the
// request's context deadline cuts the wait) and off (the socket's read
// timeout does), for a completion by the conditional SET (lua/set_ifeq.lua
// on this Redis 7.0) and by the complete script (before the store read the
// server's clock).
func TestNotRecordedOnlyWhenTrue(t *testing.T) {
	for _, tc := range []struct {
		ctxTimeout bool
		completion string // the script the held completion runs
	}{{true, redisstore.SetIfEqSHA}, {false, redisstore.SetIfEqSHA}, {true, redisstore.CompleteSHA}, {false, redisstore.CompleteSHA}} {
		ctxTimeout := tc.ctxTimeout
		name := "ContextTimeoutEnabled=false"
		if ctxTimeout {
			name = "ContextTimeoutEnabled=true"
		}
		if tc.completion == redisstore.SetIfEqSHA {
			name += "/conditional-set"
		} else {
			name += "/complete-script"
		}
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			const takeover = time.Second
			p := testenv.NewProxy(t, testenv.RedisAddr(t))
			c := redis.NewClient(&redis.Options{Addr: p.Addr(), ContextTimeoutEnabled: ctxTimeout,
				ReadTimeout: 500 * time.Millisecond, MaxRetries: -1})
			t.Cleanup(func() { _ = c.Close() })
			s := newStore(t, c)
			require.NoError(t, s.LoadScripts(ctx))
			if tc.completion == redisstore.CompleteSHA {
				s.ForgetServerClocks()
			}
			g, err := idem.New[string](s, idem.WithTakeoverAfter(takeover), idem.WithHeartbeat(takeover/4))
			require.NoError(t, err)

			// Every completion request (the script's SHA) sent within the
			// hold of the first is held by the network until then, and
			// delivered.
			p.HoldMatching([]byte(tc.completion), takeover+300*time.Millisecond)
			v, err := g.Do(ctx, "k", func(context.Context) (string, error) { return "v", nil })
			t.Logf("Do = %q, %v", v, err)
			assert.Equal(t, "v", v)
			select {
			case <-p.Delivered():
			case <-ctx.Done():
				t.Fatal("the held completion was never delivered")
			}
			time.Sleep(200 * time.Millisecond) // let the delivered request run
			sk, kerr := guardinfo.StorageKey(g, "k")
			require.NoError(t, kerr)
			rc := standalone(t)
			raw, gerr := rc.Get(ctx, s.Key(sk)).Result()
			rec, rerr := s.Get(ctx, sk)
			completed := rerr == nil && rec.Status == storekit.StatusCompleted
			t.Logf("record: %v %v (raw %d bytes, %v)", rec, rerr, len(raw), gerr)
			if errors.Is(err, storekit.ErrNotRecorded) {
				assert.False(t, completed, "Do answered %v and the record ended completed", err)
			}
			if err == nil {
				assert.True(t, completed, "Do answered success and the record is %v %v", rec, rerr)
			}
		})
	}
}
