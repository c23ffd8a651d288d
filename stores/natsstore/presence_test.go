package natsstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/natsstore"
)

// twoStores returns two Stores on one bucket, each on a connection of its
// own (so each has a presence token of its own), and the connections.
func twoStores(t *testing.T) (a, b *natsstore.Store, nca, ncb *nats.Conn) {
	url := testenv.NATSURL(t)
	nca, jsa := connect(t, url)
	kv := newBucket(t, jsa)
	a, err := natsstore.New(kv, natsstore.WithoutCleanup())
	require.NoError(t, err)
	ncb, jsb := connect(t, url)
	kvb, err := jsb.KeyValue(ctxT(t), kv.Bucket())
	require.NoError(t, err)
	b, err = natsstore.New(kvb, natsstore.WithJetStream(jsb), natsstore.WithoutCleanup())
	require.NoError(t, err)
	// b's first write reads the bucket's status once; have it done.
	_, err = b.Claim(ctxT(t), claimReq("idem:warm", "w", "", ""))
	require.NoError(t, err)
	return a, b, nca, ncb
}

func claimReq(key, nonce, hash, owner string) storekit.ClaimRequest {
	return storekit.ClaimRequest{Key: key, Nonce: nonce, PayloadHash: hash, LeaseTTL: time.Hour,
		TakeoverAfter: 30 * time.Second, Owner: owner}
}

// sent runs f and returns how many messages nc published meanwhile.
func sent(nc *nats.Conn, f func()) uint64 {
	before := nc.Stats().OutMsgs
	f()
	return nc.Stats().OutMsgs - before
}

// TestClaimAsksOwner: a claim asks the owner of another process's live
// claim of the same payload only then, with one request; it takes the
// claim over (OwnerGone) once the owner's connection is closed, and never
// while it is open. A fresh claim and a replay send no request.
func TestClaimAsksOwner(t *testing.T) {
	a, b, nca, ncb := twoStores(t)
	ownerA, ownerB := a.Owner(), b.Owner()
	require.NotEmpty(t, ownerA)
	require.NotEmpty(t, ownerB)
	require.NotEqual(t, ownerA, ownerB)
	require.Equal(t, ownerB, b.Owner(), "one presence per connection and bucket")
	const key = "idem:asks"
	var r storekit.ClaimResult
	var err error

	require.EqualValues(t, 1, sent(nca, func() { r, err = a.Claim(ctxT(t), claimReq(key, "a", "h", ownerA)) }), "a fresh claim is one publish")
	require.NoError(t, err)
	require.Equal(t, storekit.Claimed, r.Outcome)
	require.EqualValues(t, 3, sent(ncb, func() { r, err = b.Claim(ctxT(t), claimReq(key, "b", "h", ownerB)) }),
		"the refused publish, the read and one request to the owner")
	require.NoError(t, err)
	require.Equal(t, storekit.Existing, r.Outcome, "a live owner is never taken over")
	require.EqualValues(t, 2, sent(ncb, func() { r, err = b.Claim(ctxT(t), claimReq(key, "b", "other", ownerB)) }),
		"another payload: no request")
	require.NoError(t, err)
	require.Equal(t, storekit.Existing, r.Outcome)
	l, err := b.OwnerLiveness(ctxT(t), ownerA)
	require.NoError(t, err)
	require.Equal(t, storekit.Alive, l)

	nca.Close()
	closed := time.Now()
	require.Eventually(t, func() bool {
		l, err := b.OwnerLiveness(ctxT(t), ownerA)
		return err == nil && l == storekit.Gone
	}, 5*time.Second, time.Millisecond)
	// A request racing the close may still reach the closing connection
	// and time out (alive); the next one is answered "no responders".
	t.Logf("the owner was known gone %v after its connection closed", time.Since(closed).Round(time.Microsecond))
	r, err = b.Claim(ctxT(t), claimReq(key, "b2", "h", ownerB))
	require.NoError(t, err)
	require.Equal(t, storekit.TookOver, r.Outcome)
	require.True(t, r.OwnerGone)
	require.EqualValues(t, 2, r.Record.Attempt)
	require.Equal(t, ownerB, r.Record.Owner)
	require.Equal(t, "b2", r.Record.Nonce)

	require.NoError(t, b.Complete(ctxT(t), key, "b2", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`"v"`), TTL: time.Hour}))
	require.EqualValues(t, 2, sent(ncb, func() { r, err = b.Claim(ctxT(t), claimReq(key, "b3", "h", ownerB)) }), "a replay: no request")
	require.NoError(t, err)
	require.Equal(t, storekit.Existing, r.Outcome)
}

// TestClaimEarlierIncarnation: a live claim left by an earlier
// incarnation of the claiming process's instance is taken over at once,
// with no request, although its token's process is alive; one of another
// instance is not.
func TestClaimEarlierIncarnation(t *testing.T) {
	a, b, _, ncb := twoStores(t)
	ownerA, ownerB := a.Owner(), b.Owner()
	_, err := a.Claim(ctxT(t), claimReq("idem:inc", "a", "h", "pod-1/inc1/"+ownerA))
	require.NoError(t, err)
	_, err = a.Claim(ctxT(t), claimReq("idem:other", "a", "h", "pod-2/inc1/"+ownerA))
	require.NoError(t, err)
	var r storekit.ClaimResult
	require.EqualValues(t, 3, sent(ncb, func() { r, err = b.Claim(ctxT(t), claimReq("idem:inc", "b", "h", "pod-1/inc2/"+ownerB)) }),
		"the refused publish, the read and the takeover: no request")
	require.NoError(t, err)
	require.Equal(t, storekit.TookOver, r.Outcome)
	require.True(t, r.OwnerGone)
	r, err = b.Claim(ctxT(t), claimReq("idem:other", "b", "h", "pod-1/inc2/"+ownerB))
	require.NoError(t, err)
	require.Equal(t, storekit.Existing, r.Outcome, "another instance, alive")
}

// TestNoPresenceWithoutConn: a bucket given without its JetStream context
// or a connection has no presence (Owner ""), and its liveness is unknown;
// Stores that have the same connection and bucket share one token.
func TestNoPresenceWithoutConn(t *testing.T) {
	_, js := connect(t, testenv.NATSURL(t))
	kv := newBucket(t, js)
	plain, err := js.KeyValue(ctxT(t), kv.Bucket())
	require.NoError(t, err)
	s, err := natsstore.New(plain, natsstore.WithoutCleanup())
	require.NoError(t, err)
	require.Empty(t, s.Owner())
	l, err := s.OwnerLiveness(ctxT(t), "0123456789abcdef0123456789abcdef")
	require.NoError(t, err)
	require.Equal(t, storekit.LivenessUnknown, l)
	_, err = natsstore.New(plain, natsstore.WithConn(nil))
	require.ErrorIs(t, err, storekit.ErrInvalidOption)

	// Stores on one connection and bucket share one presence.
	s1, err := natsstore.New(kv, natsstore.WithoutCleanup())
	require.NoError(t, err)
	s2, err := natsstore.New(plain, natsstore.WithJetStream(js), natsstore.WithoutCleanup())
	require.NoError(t, err)
	require.NotEmpty(t, s1.Owner())
	require.Equal(t, s1.Owner(), s2.Owner())
}

// TestLostPresenceSession: the presence connection of a live owner is
// closed while its fn runs (a lost session: its process and its bucket
// connection live on). Another process takes the claim over at once and
// runs fn with fencing token 2; the old owner's next heartbeat is refused,
// its fn's context is cancelled with ErrLostOwnership, and its completion
// is refused.
func TestLostPresenceSession(t *testing.T) {
	url := testenv.NATSURL(t)
	_, js := connect(t, url)
	presenceConn, _ := connect(t, url)
	kv := newBucket(t, js)
	sa, err := natsstore.New(kv, natsstore.WithConn(presenceConn), natsstore.WithoutCleanup())
	require.NoError(t, err)
	ga, err := idem.New[string](sa, idem.WithHeartbeat(100*time.Millisecond)) // takeover after 30s
	require.NoError(t, err)
	_, jsb := connect(t, url)
	kvb, err := jsb.KeyValue(ctxT(t), kv.Bucket())
	require.NoError(t, err)
	sb, err := natsstore.New(kvb, natsstore.WithJetStream(jsb), natsstore.WithoutCleanup())
	require.NoError(t, err)
	gb, err := idem.New[string](sb)
	require.NoError(t, err)

	const k = "lost-session"
	started, cause, doneA := make(chan struct{}), make(chan error, 1), make(chan error, 1)
	go func() {
		_, err := ga.Do(ctxT(t), k, func(ctx context.Context) (string, error) {
			close(started)
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return "old", nil
		})
		doneA <- err
	}()
	<-started
	fnB := func(ctx context.Context) (string, error) {
		tok, _ := idem.FencingToken(ctx)
		if tok != 2 {
			return "", fmt.Errorf("fencing token %d, want 2", tok)
		}
		return "new", nil
	}
	_, err = gb.Do(ctxT(t), k, fnB)
	require.ErrorIs(t, err, idem.ErrInProgress, "a live owner is never taken over")

	presenceConn.Close()
	closed := time.Now()
	for {
		v, err := gb.Do(ctxT(t), k, fnB)
		if err == nil {
			require.Equal(t, "new", v)
			break
		}
		require.ErrorIs(t, err, idem.ErrInProgress)
		require.Less(t, time.Since(closed), 10*time.Second, "not taken over: the threshold decided")
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("taken over and run %v after the owner's presence connection closed", time.Since(closed).Round(time.Millisecond))
	select {
	case c := <-cause:
		require.ErrorIs(t, c, idem.ErrLostOwnership, "the old owner's fn is cancelled by its refused heartbeat")
	case <-time.After(10 * time.Second):
		t.Fatal("the old owner's fn was not cancelled")
	}
	require.ErrorIs(t, <-doneA, idem.ErrLostOwnership, "the old owner's completion is refused")
	v, err := gb.Do(ctxT(t), k, fnB)
	require.NoError(t, err)
	require.Equal(t, "new", v, "the new owner's outcome stands")
}

// TestWatchWakesOnDeadOwner: a watch of another process's in-progress
// claim is not woken while its owner lives, and is woken within about
// a second of the owner's connection closing, although the record does
// not change, so that a waiting duplicate claims again and takes over.
func TestWatchWakesOnDeadOwner(t *testing.T) {
	a, b, nca, _ := twoStores(t)
	const key = "idem:watched"
	_, err := a.Claim(ctxT(t), claimReq(key, "a", "h", a.Owner()))
	require.NoError(t, err)
	changed, stop, err := b.Watch(ctxT(t), key)
	require.NoError(t, err)
	defer stop()
	select {
	case <-changed:
		t.Fatal("woken while the owner lives")
	case <-time.After(2500 * time.Millisecond):
	}
	nca.Close()
	closed := time.Now()
	select {
	case <-changed:
		t.Logf("the watch was woken %v after the owner's connection closed", time.Since(closed).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("the watch was not woken within 10s of the owner's death")
	}
	r, err := b.Claim(ctxT(t), claimReq(key, "b", "h", b.Owner()))
	require.NoError(t, err)
	require.Equal(t, storekit.TookOver, r.Outcome)
	require.True(t, r.OwnerGone)
}
