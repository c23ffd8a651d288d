package storetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

// The step cases run a Guard over the store: a step is an ordinary record
// under a derived key, so a store that keeps the Store contract supports
// steps with nothing to add, and these cases check it does.

// stepRun is one run of a step's fn, as the crash cases log it.
type stepRun struct {
	step, key string
	token     int64
	who       string
}

// threeSteps returns the guarded fn of the step cases: three steps, each
// logging its run and returning who; at is called at "after1" (step 1
// returned) and "in2" (inside step 2, after its run was logged), where a
// case crashes or pauses the owner. The result names the value of each
// step, "s1=... s2=... s3=...", and fail makes fn fail after step 3.
func threeSteps(who string, logRun func(stepRun), at func(ctx context.Context, point string) error, fail bool) func(context.Context) (string, error) {
	return func(ctx context.Context) (string, error) {
		var vals [3]string
		for i := range vals {
			name := fmt.Sprint("step", i+1)
			if i == 1 {
				if err := at(ctx, "after1"); err != nil {
					return "", err
				}
			}
			v, err := idem.Step(ctx, name, func(ctx context.Context) (string, error) {
				key, _ := idem.StepKey(ctx)
				tok, _ := idem.FencingToken(ctx)
				logRun(stepRun{step: name, key: key, token: tok, who: who})
				if i == 1 {
					if err := at(ctx, "in2"); err != nil {
						return "", err
					}
				}
				return who, nil
			})
			if err != nil {
				return "", err
			}
			vals[i] = v
		}
		if fail {
			return "", errors.New("failing on purpose after step 3")
		}
		return fmt.Sprintf("s1=%s s2=%s s3=%s", vals[0], vals[1], vals[2]), nil
	}
}

// checkStepRuns checks the runs of the three steps: step 1 once, step 3
// once, step 2 once, or twice (rerun) with the same StepKey and a higher
// fencing token.
func checkStepRuns(t *testing.T, runs []stepRun, rerun2 bool) {
	t.Helper()
	by := map[string][]stepRun{}
	keys := map[string]bool{}
	for _, r := range runs {
		by[r.step] = append(by[r.step], r)
		keys[r.key] = true
	}
	want2 := 1
	if rerun2 {
		want2 = 2
	}
	if len(by["step1"]) != 1 || len(by["step2"]) != want2 || len(by["step3"]) != 1 {
		t.Errorf("step runs: step1 %d, step2 %d, step3 %d; want 1, %d, 1 (runs: %+v)",
			len(by["step1"]), len(by["step2"]), len(by["step3"]), want2, runs)
		return
	}
	if len(keys) != 3 {
		t.Errorf("%d distinct StepKeys over the three steps, want 3 (runs: %+v)", len(keys), runs)
	}
	if s2 := by["step2"]; rerun2 && (s2[0].key != s2[1].key || s2[1].token <= s2[0].token) {
		t.Errorf("step 2 ran again with key %s token %d after key %s token %d: want the same key and a higher token",
			s2[1].key, s2[1].token, s2[0].key, s2[0].token)
	}
}

// owner is a store as one owner process sees it: crash makes every later
// operation fail without reaching the store (a dead process), pause holds
// them until resume (a stopped one).
type owner struct {
	storekit.Store
	dead   atomic.Bool
	mu     sync.Mutex
	paused chan struct{} // non-nil while paused: closed by resume
}

var errDead = errors.New("storetest: the owner process is dead")

func (o *owner) gate(ctx context.Context) error {
	if o.dead.Load() {
		return errDead
	}
	o.mu.Lock()
	p := o.paused
	o.mu.Unlock()
	if p != nil {
		select {
		case <-p:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if o.dead.Load() {
		return errDead
	}
	return nil
}

func (o *owner) pause() {
	o.mu.Lock()
	o.paused = make(chan struct{})
	o.mu.Unlock()
}

func (o *owner) resume() {
	o.mu.Lock()
	close(o.paused)
	o.paused = nil
	o.mu.Unlock()
}

func (o *owner) Claim(ctx context.Context, r storekit.ClaimRequest) (storekit.ClaimResult, error) {
	if err := o.gate(ctx); err != nil {
		return storekit.ClaimResult{}, err
	}
	return o.Store.Claim(ctx, r)
}

func (o *owner) Heartbeat(ctx context.Context, key, nonce string, ttl time.Duration) error {
	if err := o.gate(ctx); err != nil {
		return err
	}
	return o.Store.Heartbeat(ctx, key, nonce, ttl)
}

func (o *owner) Complete(ctx context.Context, key, nonce string, c storekit.Completion) error {
	if err := o.gate(ctx); err != nil {
		return err
	}
	return o.Store.Complete(ctx, key, nonce, c)
}

func (o *owner) Release(ctx context.Context, key, nonce string) error {
	if err := o.gate(ctx); err != nil {
		return err
	}
	return o.Store.Release(ctx, key, nonce)
}

func (o *owner) Get(ctx context.Context, key string) (*storekit.Record, error) {
	if err := o.gate(ctx); err != nil {
		return nil, err
	}
	return o.Store.Get(ctx, key)
}

func (o *owner) Delete(ctx context.Context, key string) error {
	if err := o.gate(ctx); err != nil {
		return err
	}
	return o.Store.Delete(ctx, key)
}

// stepGuardOptions are the Guard options of the step cases with takeover
// threshold th. A Guard that need not be taken over uses stepLong, so that
// a slow store never lets its claim lapse (the lapse cut-off would cancel
// fn's context); only an owner that a case takes over uses a short one.
func stepGuardOptions(th time.Duration) []idem.Option {
	return []idem.Option{idem.WithTakeoverAfter(th), idem.WithHeartbeat(th / 4), idem.OnDuplicate(idem.Wait), idem.WithTTL(time.Hour)}
}

// stepLong is the takeover threshold of a Guard no case takes over.
const stepLong = time.Minute

// stepOwnerTries bounds how often a crash case starts over with twice the
// owner's threshold when the owner's claim lapsed before it reached the
// point where it crashes (a store too slow to refresh the claim in time):
// the threshold goes from the suite's takeover up to 32 times it.
const stepOwnerTries = 6

func stepGuard(t *testing.T, s storekit.Store, th time.Duration) *idem.Guard[string] {
	t.Helper()
	g, err := idem.New[string](s, stepGuardOptions(th)...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// stepOwnerThresholds runs try with the owner's takeover threshold doubling
// from the suite's takeover while try reports that the owner ended before
// it reached its crash or pause point.
func stepOwnerThresholds(t *testing.T, try func(th time.Duration) (reached bool)) {
	t.Helper()
	th := takeover
	for range stepOwnerTries {
		if try(th) {
			return
		}
		t.Logf("the owner's claim lapsed (takeover threshold %v) before it reached its crash point; starting over with twice the threshold", th)
		th *= 2
	}
	t.Fatalf("the owner's claim lapsed before it reached its crash point %d times, up to a takeover threshold of %v", stepOwnerTries, th/2)
}

// stepsRunOnce: a call of three steps runs each once and costs 2 store
// operations per step, 1 for the steps epoch and 2 for the call; its replay
// costs 1.
func (su *suite) stepsRunOnce(t *testing.T, s storekit.Store) {
	inst := Instrument(s)
	g := stepGuard(t, inst, stepLong)
	key := "steps-" + NewNonce()
	var mu sync.Mutex
	var runs []stepRun
	logRun := func(r stepRun) { mu.Lock(); runs = append(runs, r); mu.Unlock() }
	fn := threeSteps("a", logRun, func(context.Context, string) error { return nil }, false)
	v, err := g.Do(ctxT(t), key, fn)
	if err != nil || v != "s1=a s2=a s3=a" {
		t.Fatalf("Do = %q, %v", v, err)
	}
	// Heartbeats are left out: on a slow machine a step may outlast the
	// suite's short heartbeat interval.
	if n := inst.Total() - inst.Count(OpHeartbeat); n != 9 {
		t.Errorf("a fresh call of three steps cost %d store operations, want 9 (claim, epoch, 3 x 2, complete)", n)
	}
	inst.Reset()
	if v, err = g.Do(ctxT(t), key, fn); err != nil || v != "s1=a s2=a s3=a" || inst.Total()-inst.Count(OpHeartbeat) != 1 {
		t.Errorf("replay = %q, %v with %d store operations, want the result with 1", v, err, inst.Total())
	}
	checkStepRuns(t, runs, false)
}

// stepsCrash runs the in-process crash cases: an owner that dies (its store
// operations stop reaching the store, its fn never returns) after step 1
// returned ("after1") or inside step 2 ("in2"); a second Guard takes the
// call over and must run step 1 zero more times, step 2 again only when
// the owner died inside it (with the same StepKey), and step 3 once.
func stepsCrash(point string) func(*suite, *testing.T, storekit.Store) {
	return func(su *suite, t *testing.T, s storekit.Store) {
		stepOwnerThresholds(t, func(th time.Duration) bool { return su.stepsCrashOnce(t, s, point, th) })
	}
}

// stepsCrashOnce runs a crash case with the owner's takeover threshold th;
// it returns false when the owner's call ended before it reached point.
func (su *suite) stepsCrashOnce(t *testing.T, s storekit.Store, point string, th time.Duration) bool {
	key := "steps-" + NewNonce()
	var mu sync.Mutex
	var runs []stepRun
	logRun := func(r stepRun) { mu.Lock(); runs = append(runs, r); mu.Unlock() }
	o := &owner{Store: s}
	a := stepGuard(t, o, th)
	crashed, hang := make(chan struct{}), make(chan struct{})
	aDone := make(chan struct{})
	t.Cleanup(func() { close(hang); <-aDone })
	go func() {
		defer close(aDone)
		_, _ = a.Do(context.Background(), key, threeSteps("a", logRun, func(ctx context.Context, p string) error {
			if p == point {
				o.dead.Store(true)
				close(crashed)
				<-hang // a dead process runs nothing more
				return errDead
			}
			return nil
		}, false))
	}()
	select {
	case <-crashed:
	case <-aDone:
		return false
	}
	su.sleep(th * 3 / 2) // the owner's claim is stale by its own threshold
	b := stepGuard(t, s, stepLong)
	v, err := b.Do(ctxT(t), key, threeSteps("b", logRun, func(context.Context, string) error { return nil }, false))
	want := "s1=a s2=b s3=b"
	if err != nil || v != want {
		t.Fatalf("the takeover returned %q, %v; want %q", v, err, want)
	}
	mu.Lock()
	defer mu.Unlock()
	checkStepRuns(t, runs, point == "in2")
	return true
}

// stepsStaleOwner: an owner paused inside step 2 (its store operations
// held) is taken over; the new attempt runs step 2 again and step 3, then
// fails (so the call is released and a third attempt replays the steps).
// The paused owner, resumed, must not record over the new attempt's step:
// the third attempt replays step 2's value from the second.
func (su *suite) stepsStaleOwner(t *testing.T, s storekit.Store) {
	stepOwnerThresholds(t, func(th time.Duration) bool { return su.stepsStaleOwnerOnce(t, s, th) })
}

// stepsStaleOwnerOnce runs stepsStaleOwner with the owner's takeover
// threshold th; it returns false when the owner's call ended before it
// reached its pause.
func (su *suite) stepsStaleOwnerOnce(t *testing.T, s storekit.Store, th time.Duration) bool {
	key := "steps-" + NewNonce()
	var mu sync.Mutex
	var runs []stepRun
	logRun := func(r stepRun) { mu.Lock(); runs = append(runs, r); mu.Unlock() }
	o := &owner{Store: s}
	a := stepGuard(t, o, th)
	paused, resumed := make(chan struct{}), make(chan struct{})
	aErr := make(chan error, 1)
	go func() {
		_, err := a.Do(context.Background(), key, threeSteps("a", logRun, func(ctx context.Context, p string) error {
			if p == "in2" {
				o.pause()
				close(paused)
				<-resumed
			}
			return nil
		}, false))
		aErr <- err
	}()
	select {
	case <-paused:
	case <-aErr:
		return false
	}
	su.sleep(th * 3 / 2) // the owner's claim is stale by its own threshold
	b := stepGuard(t, s, stepLong)
	if _, err := b.Do(ctxT(t), key, threeSteps("b", logRun, func(context.Context, string) error { return nil }, true)); err == nil {
		t.Fatal("the takeover's fn was to fail")
	}
	close(resumed)
	o.resume()
	if err := <-aErr; err == nil {
		t.Error("the paused owner's call succeeded after it was taken over")
	}
	c := stepGuard(t, s, stepLong)
	v, err := c.Do(ctxT(t), key, threeSteps("c", logRun, func(context.Context, string) error { return nil }, false))
	if want := "s1=a s2=b s3=b"; err != nil || v != want {
		t.Fatalf("the third attempt returned %q, %v; want %q (step 2 as the takeover recorded it)", v, err, want)
	}
	mu.Lock()
	defer mu.Unlock()
	checkStepRuns(t, runs, true)
	return true
}

// stepsForget: Forget removes a call and its steps; the next call of the
// key runs every step again, under new StepKeys.
func (su *suite) stepsForget(t *testing.T, s storekit.Store) {
	g := stepGuard(t, s, stepLong)
	key := "steps-" + NewNonce()
	var runs []stepRun
	logRun := func(r stepRun) { runs = append(runs, r) }
	fn := threeSteps("a", logRun, func(context.Context, string) error { return nil }, false)
	if _, err := g.Do(ctxT(t), key, fn); err != nil {
		t.Fatal(err)
	}
	if err := g.Forget(ctxT(t), key); err != nil {
		t.Fatal(err)
	}
	if _, err := g.Do(ctxT(t), key, fn); err != nil {
		t.Fatal(err)
	}
	if len(runs) != 6 {
		t.Fatalf("%d step runs over a call, Forget and a call; want 6", len(runs))
	}
	for i := range 3 {
		if runs[i].key == runs[i+3].key || !strings.HasPrefix(runs[i].step, "step") {
			t.Errorf("%s: the forgotten call's StepKey came back", runs[i].step)
		}
	}
}
