package redisstore_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/redisstore"
)

// TestClaimRecordsOwner: a claim records its owner, fresh (SET NX) or taken
// over (the claim script); a takeover of a live claim whose owner's presence
// channel has a subscriber is refused, one with none is made at once and
// says OwnerGone; an earlier incarnation of the claim's instance is gone
// whatever its presence; OwnerLiveness says the same.
func TestClaimRecordsOwner(t *testing.T) {
	t.Run("ring", func(t *testing.T) {
		r := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": testenv.RedisAddr(t)}})
		t.Cleanup(func() { _ = r.Close() })
		claimRecordsOwner(t, r)
	})
	bothKinds(t, func(t *testing.T, kind string) { claimRecordsOwner(t, dial(t, kind)) })
}

func claimRecordsOwner(t *testing.T, c redisstore.Client) {
	ctx := ctxT(t)
	s := newStore(t, c)
	me := s.Owner()
	require.Len(t, me, 32)
	claim := func(key, owner string) (storekit.ClaimResult, error) {
		return s.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: randHex(8), LeaseTTL: time.Minute,
			TakeoverAfter: time.Minute, PayloadHash: "h", Owner: owner})
	}
	k := storageKey()
	r, err := claim(k, "i/a/"+me)
	require.NoError(t, err)
	require.Equal(t, storekit.Claimed, r.Outcome)
	rec, err := s.Get(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, "i/a/"+me, rec.Owner)

	l, err := s.OwnerLiveness(ctx, rec.Owner)
	require.NoError(t, err)
	assert.Equal(t, storekit.Alive, l)
	r, err = claim(k, randHex(16)) // another process: the owner lives
	require.NoError(t, err)
	assert.Equal(t, storekit.Existing, r.Outcome)

	// An earlier incarnation of instance i: gone although its token lives.
	r, err = claim(k, "i/b/"+me)
	require.NoError(t, err)
	assert.Equal(t, storekit.TookOver, r.Outcome)
	assert.True(t, r.OwnerGone)
	assert.Equal(t, "i/b/"+me, r.Record.Owner)

	// A token without a subscriber: gone.
	dead := randHex(16)
	l, err = s.OwnerLiveness(ctx, dead)
	require.NoError(t, err)
	assert.Equal(t, storekit.Gone, l)
	k2 := storageKey()
	_, err = claim(k2, dead)
	require.NoError(t, err)
	r, err = claim(k2, me)
	require.NoError(t, err)
	assert.Equal(t, storekit.TookOver, r.Outcome)
	assert.True(t, r.OwnerGone)
	assert.EqualValues(t, 2, r.Record.Attempt)
	rec, err = s.Get(ctx, k2)
	require.NoError(t, err)
	assert.Equal(t, me, rec.Owner)
	// Another payload is never taken.
	r, err = s.Claim(ctx, storekit.ClaimRequest{Key: k2, Nonce: randHex(8), LeaseTTL: time.Minute,
		TakeoverAfter: time.Minute, PayloadHash: "other", Owner: randHex(16)})
	require.NoError(t, err)
	assert.Equal(t, storekit.Existing, r.Outcome)

	// An owner trailer whose length does not match: corrupt, for the
	// client's decoder and the claim script alike.
	k3 := storageKey()
	now := time.Now().UnixMilli()
	v, err := redisstore.Encode(&storekit.Record{Key: k3, Status: storekit.StatusInProgress, Nonce: "n", PayloadHash: "h",
		Attempt: 1, StartedAt: now, HeartbeatAt: now, ExpiresAt: now + 60000, Owner: dead})
	require.NoError(t, err)
	require.NoError(t, c.(redis.Cmdable).Set(ctx, s.Key(k3), v[:len(v)-1], time.Minute).Err())
	_, err = s.Get(ctx, k3)
	require.ErrorIs(t, err, storekit.ErrCorruptRecord)
	_, err = claim(k3, me)
	require.ErrorIs(t, err, storekit.ErrCorruptRecord)
}

// TestLostPresenceSession: the presence connection of a live process is
// killed (CLIENT KILL) while one of its calls runs fn. Until go-redis
// subscribes again, its claims may be taken over: a Guard of another
// process (a store with a presence of its own) takes the claim over, the
// old owner's fn context is cancelled by its heartbeat's ErrLostOwnership,
// and its completion is refused. The other process is another client (its
// own presence); UseOwnPresence gives a second store on one client a token
// of its own.
func TestLostPresenceSession(t *testing.T) {
	srv := testenv.StartRedis(t, 7223)
	ctx := ctxT(t)
	// The old owner's client dials slowly while slow is set, so that the
	// presence subscription stays lost for a second after the kill (go-redis
	// subscribes again as soon as it has a connection).
	var slow atomic.Bool
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if slow.Load() {
			time.Sleep(time.Second)
		}
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}})
	t.Cleanup(func() { _ = c.Close() })
	c2 := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c2.Close() })
	pfx := prefix()
	old := mustNew(t, c, redisstore.WithPrefix(pfx))
	t.Cleanup(func() { _ = old.Close() })
	gOld, err := idem.New[string](old, idem.WithHeartbeat(100*time.Millisecond))
	require.NoError(t, err)
	id := presenceConn(t, c)

	other := mustNew(t, c2, redisstore.WithPrefix(pfx))
	t.Cleanup(func() { _ = other.Close() })
	gNew, err := idem.New[string](other)
	require.NoError(t, err)
	require.NotEqual(t, old.Owner(), other.Owner())

	started, cancelled := make(chan struct{}), make(chan error, 1)
	res := make(chan error, 1)
	go func() {
		_, err := gOld.Do(ctx, "k", func(fctx context.Context) (string, error) {
			close(started)
			<-fctx.Done()
			cancelled <- context.Cause(fctx)
			return "old", nil
		})
		res <- err
	}()
	<-started
	_, err = gNew.Do(ctx, "k", func(context.Context) (string, error) { return "new", nil })
	require.ErrorIs(t, err, idem.ErrInProgress, "the owner's presence lives")

	slow.Store(true)
	require.NoError(t, c2.Do(ctx, "client", "kill", "id", id).Err())
	v, err := gNew.Do(ctx, "k", func(fctx context.Context) (string, error) {
		tok, _ := idem.FencingToken(fctx)
		assert.EqualValues(t, 2, tok)
		return "new", nil
	})
	require.NoError(t, err, "the owner's presence connection is gone: taken over at once")
	require.Equal(t, "new", v)
	slow.Store(false)
	select {
	case cause := <-cancelled:
		require.ErrorIs(t, cause, idem.ErrLostOwnership)
	case <-time.After(10 * time.Second):
		t.Fatal("the old owner's fn context was not cancelled")
	}
	require.ErrorIs(t, <-res, idem.ErrLostOwnership, "the old owner's completion is refused")
	v, err = gNew.Do(ctx, "k", func(context.Context) (string, error) { return "again", nil })
	require.NoError(t, err)
	require.Equal(t, "new", v)
}

// presenceConn returns the id of the only connection of the server that
// holds a sharded subscription.
func presenceConn(t *testing.T, c *redis.Client) string {
	t.Helper()
	list, err := c.ClientList(context.Background()).Result()
	require.NoError(t, err)
	var ids []string
	for _, line := range strings.Split(list, "\n") {
		if strings.Contains(line, " ssub=1 ") {
			ids = append(ids, strings.TrimPrefix(strings.Fields(line)[0], "id="))
		}
	}
	require.Len(t, ids, 1, list)
	return ids[0]
}

// TestPresenceRefused: a server that refuses SSUBSCRIBE (as a proxy without
// Pub/Sub does) leaves the store without a presence: Owner is "", and
// claims wait for the takeover threshold.
func TestPresenceRefused(t *testing.T) {
	srv := testenv.StartRedis(t, 7224, "--rename-command", "SSUBSCRIBE", "")
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = c.Close() })
	s := newStore(t, c)
	start := time.Now()
	require.Equal(t, "", s.Owner())
	require.Less(t, time.Since(start), redisstore.DefaultWatchTimeout, "the refusal is known at once")
	g, err := idem.New[string](s)
	require.NoError(t, err)
	v, err := g.Do(ctxT(t), "k", func(context.Context) (string, error) { return "v", nil })
	require.NoError(t, err)
	require.Equal(t, "v", v)
}

// TestPresenceSentinel: through Sentinel (redis.NewFailoverClient) the
// presence subscription is held on the master, where the claim script asks
// for it: a live owner's claim is not taken, and once the owner's store is
// closed (its subscription ends) the next claim takes it over at once.
func TestPresenceSentinel(t *testing.T) {
	master := testenv.StartRedis(t, 7225)
	dir := t.TempDir()
	conf := filepath.Join(dir, "sentinel.conf")
	require.NoError(t, os.WriteFile(conf, []byte("bind 127.0.0.1\nport 7226\ndir "+dir+"\nlogfile sentinel.log\n"+
		"sentinel monitor m 127.0.0.1 "+strconv.Itoa(master.Port)+" 1\n"), 0o600))
	cmd := master.Command(conf, "--sentinel")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	ctx := ctxT(t)
	dialFailover := func() *redis.Client {
		c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "m", SentinelAddrs: []string{"127.0.0.1:7226"}})
		t.Cleanup(func() { _ = c.Close() })
		return c
	}
	c := dialFailover()
	require.Eventually(t, func() bool { return c.Ping(ctx).Err() == nil }, 10*time.Second, 50*time.Millisecond)
	pfx := prefix()
	owner := mustNew(t, c, redisstore.WithPrefix(pfx))
	t.Cleanup(func() { _ = owner.Close() })
	other := mustNew(t, dialFailover(), redisstore.WithPrefix(pfx))
	t.Cleanup(func() { _ = other.Close() })
	require.NotEmpty(t, owner.Owner())
	require.NotEmpty(t, other.Owner())
	require.NotEqual(t, owner.Owner(), other.Owner())
	l, err := other.OwnerLiveness(ctx, owner.Owner())
	require.NoError(t, err)
	require.Equal(t, storekit.Alive, l)

	k := storageKey()
	claim := func(s *redisstore.Store) storekit.ClaimResult {
		r, err := s.Claim(ctx, storekit.ClaimRequest{Key: k, Nonce: randHex(8), LeaseTTL: time.Minute,
			TakeoverAfter: time.Minute, PayloadHash: "h", Owner: s.Owner()})
		require.NoError(t, err)
		return r
	}
	require.Equal(t, storekit.Claimed, claim(owner).Outcome)
	require.Equal(t, storekit.Existing, claim(other).Outcome, "the owner lives")
	tok := owner.Owner()
	require.NoError(t, owner.Close())
	// The server drops the subscription when it reads the connection's close.
	require.Eventually(t, func() bool {
		l, err := other.OwnerLiveness(ctx, tok)
		return err == nil && l == storekit.Gone
	}, 5*time.Second, 10*time.Millisecond)
	r := claim(other)
	require.Equal(t, storekit.TookOver, r.Outcome, "the owner's store closed: its presence is gone")
	require.True(t, r.OwnerGone)
}
