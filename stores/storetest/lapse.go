package storetest

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

// The checks of rule 4 (fn never starts under a claim that may have
// lapsed) and of a call's steps outliving its TTL. They drive Guards over
// the store on real time, so they run in the RealTime suite only, not in Clock.
var lapseTests = []subtest{
	{"LateClaimReply", (*suite).lateClaimReply},
	{"LateStepClaimReply", (*suite).lateStepClaimReply},
	{"StepsOutliveTTL", (*suite).stepsOutliveTTL},
}

// late is a store as one caller sees it over a slow network: the claim
// and heartbeat replies hold picks are held back (the request has reached the
// store and been applied) until release is called; dead makes every later
// write fail without reaching the store, as a process that died.
type late struct {
	storekit.Store
	hold    func(op string, n int64) bool // op "claim" or "heartbeat"; n counts that op from 1
	claims  atomic.Int64
	beats   atomic.Int64
	held    chan struct{} // closed when a reply is first held back
	once    sync.Once
	release chan struct{}
	dead    atomic.Bool
}

func newLate(s storekit.Store, hold func(op string, n int64) bool) *late {
	return &late{Store: s, hold: hold, held: make(chan struct{}), release: make(chan struct{})}
}

// wait holds a reply back, when hold picks it, until release.
func (l *late) wait(op string, n int64) {
	if l.hold == nil || !l.hold(op, n) {
		return
	}
	l.once.Do(func() { close(l.held) })
	<-l.release
}

func (l *late) Claim(ctx context.Context, r storekit.ClaimRequest) (storekit.ClaimResult, error) {
	if l.dead.Load() {
		return storekit.ClaimResult{}, errDead
	}
	res, err := l.Store.Claim(ctx, r)
	l.wait("claim", l.claims.Add(1))
	return res, err
}

func (l *late) Heartbeat(ctx context.Context, key, nonce string, lease time.Duration) error {
	if l.dead.Load() {
		return errDead
	}
	err := l.Store.Heartbeat(ctx, key, nonce, lease)
	l.wait("heartbeat", l.beats.Add(1))
	return err
}

func (l *late) Complete(ctx context.Context, key, nonce string, c storekit.Completion) error {
	if l.dead.Load() {
		return errDead
	}
	return l.Store.Complete(ctx, key, nonce, c)
}

func (l *late) Release(ctx context.Context, key, nonce string) error {
	if l.dead.Load() {
		return errDead
	}
	return l.Store.Release(ctx, key, nonce)
}

// lapseGuard is a Guard over s for these checks: a takeover threshold of
// a second (room for a slow backend), heartbeats every 100ms, Wait.
func lapseGuard(t *testing.T, s storekit.Store, opts ...idem.Option) *idem.Guard[string] {
	t.Helper()
	g, err := idem.New[string](s, append([]idem.Option{
		idem.WithTakeoverAfter(time.Second), idem.WithHeartbeat(100 * time.Millisecond), idem.OnDuplicate(idem.Wait),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// lateClaimReply: a caller's claim reaches the store, but its reply comes
// back only after another caller has taken the claim over (it went stale
// meanwhile) and run fn. The late caller must not start fn: it claims
// again and replays the other caller's outcome. fn runs once.
func (su *suite) lateClaimReply(t *testing.T, s storekit.Store) {
	key := "lapse-" + NewNonce()
	var runs atomic.Int64
	fn := func(v string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { runs.Add(1); return v, nil }
	}
	l := newLate(s, func(op string, n int64) bool { return op == "claim" && n == 1 })
	a := lapseGuard(t, l)
	aDone := make(chan error, 1)
	var aV string
	go func() {
		var err error
		aV, err = a.Do(ctxT(t), key, fn("a"))
		aDone <- err
	}()
	<-l.held // a's claim is in the store; its reply is on its way
	b := lapseGuard(t, s)
	bV, err := b.Do(ctxT(t), key, fn("b")) // waits until a's claim is stale, takes it over
	if err != nil || bV != "b" {
		t.Fatalf("the second caller got %q, %v; want b (it took the stale claim over)", bV, err)
	}
	close(l.release)
	if err := <-aDone; err != nil || aV != "b" {
		t.Errorf("the late caller got %q, %v; want the replay b", aV, err)
	}
	if n := runs.Load(); n != 1 {
		t.Errorf("fn ran %d times, want 1 (the late caller started fn under a claim that had lapsed)", n)
	}
}

// lateStepClaimReply: the same for a step. The owner's call loses its
// claim (its heartbeats stop reaching the store) while its step's claim
// reply is held back; another attempt takes the call over and runs the
// step. When the late reply arrives, the step must not run: it replays.
func (su *suite) lateStepClaimReply(t *testing.T, s storekit.Store) {
	key := "lapse-step-" + NewNonce()
	var steps atomic.Int64
	step := func(v string) func(context.Context) (string, error) {
		return func(context.Context) (string, error) { steps.Add(1); return v, nil }
	}
	// Claims: the call's (1), the steps epoch's (2), the step's (3).
	l := newLate(s, func(op string, n int64) bool { return op == "claim" && n == 3 })
	a := lapseGuard(t, l)
	aDone := make(chan error, 1)
	go func() {
		_, err := a.Do(ctxT(t), key, func(ctx context.Context) (string, error) {
			return idem.Step(ctx, "charge", step("a"))
		})
		aDone <- err
	}()
	<-l.held
	l.dead.Store(true) // the owner's call can no longer heartbeat: it goes stale
	b := lapseGuard(t, s)
	bV, err := b.Do(ctxT(t), key, func(ctx context.Context) (string, error) {
		return idem.Step(ctx, "charge", step("b"))
	})
	if err != nil || bV != "b" {
		t.Fatalf("the takeover got %q, %v; want b", bV, err)
	}
	close(l.release)
	<-aDone // it fails: its call was taken over
	if n := steps.Load(); n != 1 {
		t.Errorf("the step ran %d times, want 1 (the late owner started it under a claim that had lapsed)", n)
	}
}

// stepsOutliveTTL: a call whose TTL is shorter than its run runs a step,
// heartbeats past the TTL (and past the lifetime its step records were
// first written with), then dies. The takeover must replay the step, not
// run it again under a new StepKey.
func (su *suite) stepsOutliveTTL(t *testing.T, s storekit.Store) {
	key := "steps-ttl-" + NewNonce()
	const ttl = 200 * time.Millisecond
	var steps atomic.Int64
	var keys sync.Map
	step := func(ctx context.Context) (string, error) {
		steps.Add(1)
		k, _ := idem.StepKey(ctx)
		keys.Store(k, true)
		return "charged", nil
	}
	l := newLate(s, nil)
	a := lapseGuard(t, l, idem.WithTTL(ttl))
	aDone := make(chan error, 1)
	go func() {
		_, err := a.Do(ctxT(t), key, func(ctx context.Context) (string, error) {
			if _, err := idem.Step(ctx, "charge", step); err != nil {
				return "", err
			}
			// Outlive the TTL, the lease (2s) and the steps' first
			// lifetime (TTL + lease), heartbeating, then die.
			time.Sleep(4 * time.Second)
			l.dead.Store(true)
			<-ctx.Done()
			return "", ctx.Err()
		})
		aDone <- err
	}()
	if err := <-aDone; err == nil {
		t.Fatal("the owner that died succeeded")
	}
	b := lapseGuard(t, s, idem.WithTTL(ttl))
	v, err := b.Do(ctxT(t), key, func(ctx context.Context) (string, error) {
		return idem.Step(ctx, "charge", step)
	})
	if err != nil || v != "charged" {
		t.Fatalf("the takeover got %q, %v; want the step's replay", v, err)
	}
	n := 0
	keys.Range(func(any, any) bool { n++; return true })
	if got := steps.Load(); got != 1 || n != 1 {
		t.Errorf("the step ran %d times under %d StepKeys, want 1 and 1 (its records expired while its call lived)", got, n)
	}
}
