package natsstore_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/natsstore"
)

const (
	childBucketEnv = "IDEM_NATS_OWNER_BUCKET"
	childKeyEnv    = "IDEM_NATS_OWNER_KEY"
)

// TestOwnerChild is the process TestDeadOwnerTakenOverAtOnce starts: on
// a connection of its own, a g.Do per key (comma-separated) with the
// default options (a 30s takeover threshold) whose fn prints its key and
// fencing token and holds the claim until the process is killed. It is
// skipped when run as a test.
func TestOwnerChild(t *testing.T) {
	bucket := os.Getenv(childBucketEnv)
	if bucket == "" {
		t.Skip("the child process of TestDeadOwnerTakenOverAtOnce")
	}
	_, js := connect(t, testenv.NATSURL(t))
	kv, err := natsstore.CreateBucket(context.Background(), js, bucket)
	require.NoError(t, err)
	s, err := natsstore.New(kv)
	require.NoError(t, err)
	g, err := idem.New[string](s)
	require.NoError(t, err)
	errs := make(chan error)
	for _, k := range strings.Split(os.Getenv(childKeyEnv), ",") {
		go func() {
			_, err := g.Do(context.Background(), k, func(ctx context.Context) (string, error) {
				tok, _ := idem.FencingToken(ctx)
				fmt.Printf("claimed %s %d\n", k, tok)
				select {}
			})
			errs <- err
		}()
	}
	require.NoError(t, <-errs)
}

// startOwner starts TestOwnerChild on bucket and keys and waits for its
// claims; the process is killed at the end of the test.
func startOwner(t *testing.T, bucket string, keys ...string) (*exec.Cmd, <-chan struct{}) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestOwnerChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childBucketEnv+"="+bucket, childKeyEnv+"="+strings.Join(keys, ","))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	claimed, done := make(chan string, len(keys)), make(chan struct{})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "claimed ") {
				claimed <- sc.Text()
			}
		}
		_ = cmd.Wait()
		close(done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-done
	})
	for range keys {
		select {
		case line := <-claimed:
			require.True(t, strings.HasSuffix(line, " 1"), line)
		case <-done:
			t.Fatal("the owner process ended before it claimed")
		case <-time.After(60 * time.Second):
			t.Fatal("the owner process did not claim within 60s")
		}
	}
	return cmd, done
}

// TestDeadOwnerTakenOverAtOnce: a process that holds claims is never
// taken over while it lives, running or paused (SIGSTOP: it does not
// answer, the request times out, and that counts as alive); once it is
// killed (SIGKILL), the server answers "no responders" on its subject,
// and a retrying caller (one key) and a waiting duplicate (another key)
// each take a claim over and run fn, with fencing token 2, within
// seconds, not after the 30s takeover threshold.
func TestDeadOwnerTakenOverAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns a process")
	}
	_, js := connect(t, testenv.NATSURL(t))
	kv := newBucket(t, js)
	s, err := natsstore.New(kv, natsstore.WithoutCleanup())
	require.NoError(t, err)
	g, err := idem.New[string](s) // defaults: takeover after 30s
	require.NoError(t, err)
	const k, kw = "dead-owner", "dead-owner-wait"
	cmd, done := startOwner(t, kv.Bucket(), k, kw)
	sk, err := g.StorageKey(k)
	require.NoError(t, err)
	rec, err := s.Get(ctxT(t), sk)
	require.NoError(t, err)
	require.NotEmpty(t, rec.Owner)
	liveness := func() storekit.Liveness {
		l, err := s.OwnerLiveness(ctxT(t), rec.Owner)
		require.NoError(t, err)
		return l
	}
	var runs atomic.Int32
	fn := func(ctx context.Context) (string, error) {
		runs.Add(1)
		tok, _ := idem.FencingToken(ctx)
		if tok != 2 {
			return "", fmt.Errorf("fencing token %d, want 2", tok)
		}
		return "parent", nil
	}

	_, err = g.Do(ctxT(t), k, fn)
	require.ErrorIs(t, err, idem.ErrInProgress, "a live owner is never taken over")
	require.Equal(t, storekit.Alive, liveness())

	requirePausedAlive(t, cmd, func() error { _, err := g.Do(ctxT(t), k, fn); return err })
	require.Equal(t, storekit.Alive, liveness(), "a paused owner lets the request time out: alive")
	require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
	_, err = g.Do(ctxT(t), k, fn)
	require.ErrorIs(t, err, idem.ErrInProgress, "a resumed owner is alive")
	require.Zero(t, runs.Load())

	// A waiting duplicate of the other key, from before the kill.
	gw, err := idem.New[string](s, idem.OnDuplicate(idem.Wait))
	require.NoError(t, err)
	waited := startWaiter(t, gw, kw, fn)
	time.Sleep(200 * time.Millisecond)

	require.NoError(t, cmd.Process.Kill())
	<-done
	killed := time.Now()
	for {
		v, err := g.Do(ctxT(t), k, fn)
		if err == nil {
			require.Equal(t, "parent", v)
			break
		}
		require.ErrorIs(t, err, idem.ErrInProgress)
		require.Less(t, time.Since(killed), 10*time.Second, "the dead owner's claim is still in the way: the takeover waited for the threshold")
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("a caller retrying every 100ms ran fn %v after the owner was killed (takeover threshold 30s)", time.Since(killed).Round(time.Millisecond))
	select {
	case w := <-waited:
		require.NoError(t, w.err, "waiter")
		require.Equal(t, "parent", w.v)
		t.Logf("the waiting duplicate ran fn %v after the kill", w.at.Sub(killed).Round(time.Millisecond))
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting duplicate was not served within 10s of the kill")
	}
	require.EqualValues(t, 2, runs.Load(), "fn ran once per key, after the kill")
	require.Equal(t, storekit.Gone, liveness())
}

// requirePausedAlive stops cmd (SIGSTOP) for 2s, during which every call
// of do must end in idem.ErrInProgress: a paused owner does not answer,
// its request times out, and that counts as alive.
func requirePausedAlive(t *testing.T, cmd *exec.Cmd, do func() error) {
	t.Helper()
	require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
	testenv.WaitStopped(t, cmd.Process.Pid)
	stopped := time.Now()
	for time.Since(stopped) < 2*time.Second {
		start := time.Now()
		require.ErrorIs(t, do(), idem.ErrInProgress, "a paused owner is alive: never taken over before the threshold")
		t.Logf("a call meeting the paused owner returned in %v (its request timed out)", time.Since(start).Round(time.Millisecond))
	}
}

// waitResult is what a waiting duplicate got, and when.
type waitResult struct {
	at  time.Time
	v   string
	err error
}

// startWaiter calls g.Do(key, fn) in the background (for at most 30s)
// and hands its result on the channel; the test's clean-up ends it
// before the connections close.
func startWaiter(t *testing.T, g *idem.Guard[string], key string, fn func(context.Context) (string, error)) <-chan waitResult {
	out, res := make(chan waitResult, 1), make(chan waitResult, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	go func() {
		v, err := g.Do(ctx, key, fn)
		res <- waitResult{time.Now(), v, err}
	}()
	finished := make(chan struct{})
	go func() {
		r := <-res
		out <- r
		close(finished)
	}()
	t.Cleanup(func() { cancel(); <-finished })
	return out
}

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
