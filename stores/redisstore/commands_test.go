package redisstore_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/idem-go/idem/stores/redisstore/internal/redisbench"
	"github.com/redis/go-redis/v9"
)

// commandStats returns the calls per command since the last CONFIG
// RESETSTAT, commands run inside scripts included, and the microseconds
// per call of each.
func commandStats(t *testing.T, c *redis.Client) (map[string]int, map[string]float64) {
	t.Helper()
	usec, n, err := redisbench.CommandStats(context.Background(), c)
	require.NoError(t, err)
	calls, perCall := map[string]int{}, map[string]float64{}
	for name, k := range n {
		calls[name] = int(k)
		if k > 0 {
			perCall[name] = usec[name] / float64(k)
		}
	}
	delete(calls, "config|resetstat")
	delete(calls, "info")
	delete(calls, "hello") // a new connection of the pool
	return calls, perCall
}

// TestCommandsInsideScripts counts, on a private server, the Redis commands
// each guarded call runs, those inside the scripts included: a fresh call is
// one SET NX GET PX and one EVALSHA of lua/set_ifeq.lua (GET, SET: Redis
// 7.0 has no SET ... IFEQ; no PUBLISH, since nobody waits); before the
// store has read the server's clock, the EVALSHA is the complete script's
// (GET, PEXPIRETIME, TIME, SET); a replay is the same SET alone: no script,
// no transaction, no clock.
func TestCommandsInsideScripts(t *testing.T) {
	srv := testenv.StartRedis(t, 7221)
	ctx := ctxT(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	s := newStore(t, c)
	require.NoError(t, s.LoadScripts(ctx))
	g, err := idem.New[string](s, idem.WithHeartbeat(time.Minute), idem.WithTakeoverAfter(3*time.Minute))
	require.NoError(t, err)
	fn := func(context.Context) (string, error) { return "v", nil }

	require.NoError(t, c.ConfigResetStat(ctx).Err())
	_, err = g.Do(ctx, "k", fn)
	require.NoError(t, err)
	fresh, usec := commandStats(t, c)
	t.Logf("fresh call: %v (usec per call %v)", fresh, usec)
	assert.Equal(t, map[string]int{"set": 2, "evalsha": 1, "get": 1}, fresh)

	require.NoError(t, c.ConfigResetStat(ctx).Err())
	v, err := g.Do(ctx, "k", fn)
	require.NoError(t, err)
	assert.Equal(t, "v", v)
	replay, usec := commandStats(t, c)
	t.Logf("replay: %v (usec per call %v)", replay, usec)
	assert.Equal(t, map[string]int{"set": 1}, replay)

	// No reading of the server's clock: the complete script.
	// The completion starts a reading in the background (up to three
	// TIMEs, which are left out).
	s.ForgetServerClocks()
	require.NoError(t, c.ConfigResetStat(ctx).Err())
	_, err = g.Do(ctx, "k2", fn)
	require.NoError(t, err)
	fresh, usec = commandStats(t, c)
	t.Logf("fresh call, no clock read yet: %v (usec per call %v)", fresh, usec)
	assert.GreaterOrEqual(t, fresh["time"], 1, "the script's own TIME")
	delete(fresh, "time")
	assert.Equal(t, map[string]int{"set": 2, "evalsha": 1, "get": 1, "pexpiretime": 1}, fresh)

	// The server lost its scripts (a restart, SCRIPT FLUSH): the
	// conditional SET's EVALSHA fails with NOSCRIPT and EVAL runs it,
	// caching it again for the next completion.
	_, err = s.ReadServerClock(ctx, "k") // not left to the background reading k2 started
	require.NoError(t, err)
	require.NoError(t, c.ScriptFlush(ctx).Err())
	h := &counter{}
	c.AddHook(h)
	for i, want := range [][]string{{"set", "evalsha", "eval"}, {"set", "evalsha"}} {
		h.reset()
		key := "k-flushed-" + strconv.Itoa(i)
		_, err = g.Do(ctx, key, fn)
		require.NoError(t, err)
		assert.Equal(t, want, h.sent(), "call %d after SCRIPT FLUSH", i)
		assert.Equal(t, []string{redisstore.SetIfEqSHA}, h.scripts(), "call %d after SCRIPT FLUSH", i)
		sk, err := guardinfo.StorageKey(g, key)
		require.NoError(t, err)
		rec, err := s.Get(ctx, sk)
		require.NoError(t, err)
		assert.Equal(t, storekit.StatusCompleted, rec.Status)
	}
}
