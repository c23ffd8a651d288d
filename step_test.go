package idem_test

import (
	"context"
	"errors"
	"regexp"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/storetest"
)

var stepKeyShape = regexp.MustCompile(`^[0-9a-z_-]{1,64}$`)

// twoSteps is a fn of two steps (a string and an int step, whatever the
// Guard's type) that fails after the first when failAfter1 is set. It
// counts the runs of each step and records their StepKeys.
type twoSteps struct {
	mu         sync.Mutex
	runs       map[string]int
	keys       map[string]string
	failAfter1 bool
}

func (s *twoSteps) step(ctx context.Context, name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runs == nil {
		s.runs, s.keys = map[string]int{}, map[string]string{}
	}
	s.runs[name]++
	k, _ := idem.StepKey(ctx)
	if old, ok := s.keys[name]; ok && old != k {
		s.keys[name] = "CHANGED"
		return
	}
	s.keys[name] = k
}

func (s *twoSteps) fn(ctx context.Context) (int, error) {
	a, err := idem.Step(ctx, "charge", func(ctx context.Context) (string, error) {
		s.step(ctx, "charge")
		return "ch_1", nil
	})
	if err != nil {
		return 0, err
	}
	if a != "ch_1" {
		return 0, errors.New("step 1 replayed " + a)
	}
	if s.failAfter1 {
		return 0, errors.New("crash after charge")
	}
	b, err := idem.Step(ctx, "email", func(ctx context.Context) (int, error) {
		s.step(ctx, "email")
		return 42, nil
	})
	return b, err
}

func TestStepsRunOnceAndCost(t *testing.T) {
	inst := storetest.Instrument(mustMemStore(t))
	g, err := idem.New[int](inst)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := &twoSteps{}
	v, err := g.Do(ctx, "k", s.fn)
	if err != nil || v != 42 {
		t.Fatalf("Do = %d, %v; want 42, nil", v, err)
	}
	// claim, steps epoch, 2 x (step claim, step complete), complete
	if got := inst.Total(); got != 7 {
		t.Fatalf("a call of two steps cost %d store operations, want 7", got)
	}
	for name, k := range s.keys {
		if !stepKeyShape.MatchString(k) {
			t.Fatalf("StepKey of %s = %q, not [0-9a-z_-]{1,64}", name, k)
		}
	}
	if s.keys["charge"] == s.keys["email"] {
		t.Fatal("two steps share a StepKey")
	}
	inst.Reset()
	if v, err := g.Do(ctx, "k", s.fn); err != nil || v != 42 || inst.Total() != 1 {
		t.Fatalf("replay = %d, %v with %d operations; want 42, nil, 1", v, err, inst.Total())
	}
	if s.runs["charge"] != 1 || s.runs["email"] != 1 {
		t.Fatalf("runs = %v, want each step once", s.runs)
	}
}

func mustMemStore(t *testing.T) *memstore.Store {
	t.Helper()
	s, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A retry after a release replays the finished step and runs the rest.
func TestStepsReplayAfterRelease(t *testing.T) {
	inst := storetest.Instrument(mustMemStore(t))
	g, err := idem.New[int](inst)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	s := &twoSteps{failAfter1: true}
	if _, err := g.Do(ctx, "k", s.fn); err == nil {
		t.Fatal("want the crash error")
	}
	s.failAfter1 = false
	inst.Reset()
	v, err := g.Do(ctx, "k", s.fn)
	if err != nil || v != 42 {
		t.Fatalf("retry = %d, %v; want 42, nil", v, err)
	}
	if s.runs["charge"] != 1 || s.runs["email"] != 1 {
		t.Fatalf("runs = %v, want each step once", s.runs)
	}
	// claim, epoch, charge replayed (1), email run (2), complete
	if got := inst.Total(); got != 6 {
		t.Fatalf("the retry cost %d store operations, want 6", got)
	}
}

func TestStepErrorIsNotRecorded(t *testing.T) {
	g, _ := memGuard[int](t)
	ctx := context.Background()
	runs := 0
	fn := func(ctx context.Context) (int, error) {
		return idem.Step(ctx, "flaky", func(context.Context) (int, error) {
			runs++
			if runs == 1 {
				return 0, errors.New("timeout")
			}
			return 5, nil
		})
	}
	if _, err := g.Do(ctx, "k", fn); err == nil || err.Error() != "timeout" {
		t.Fatalf("err = %v, want the step's error", err)
	}
	if v, err := g.Do(ctx, "k", fn); err != nil || v != 5 || runs != 2 {
		t.Fatalf("retry = %d, %v after %d runs; want the step run again", v, err, runs)
	}
}

func TestStepWithinOneAttemptReplays(t *testing.T) {
	g, _ := memGuard[int](t)
	runs := 0
	v, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
		var sum int
		for range 2 {
			n, err := idem.Step(ctx, "same", func(context.Context) (int, error) { runs++; return 3, nil })
			if err != nil {
				return 0, err
			}
			sum += n
		}
		return sum, nil
	})
	if err != nil || v != 6 || runs != 1 {
		t.Fatalf("Do = %d, %v after %d runs; want 6 after 1", v, err, runs)
	}
}

func TestStepNoCall(t *testing.T) {
	if _, err := idem.Step(context.Background(), "x", func(context.Context) (int, error) { return 1, nil }); !errors.Is(err, idem.ErrNoCall) {
		t.Fatalf("Step outside a call = %v, want ErrNoCall", err)
	}
	g, _ := memGuard[int](t)
	_, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
		return idem.Step(ctx, "outer", func(ctx context.Context) (int, error) {
			return idem.Step(ctx, "inner", func(context.Context) (int, error) { return 1, nil })
		})
	})
	if !errors.Is(err, idem.ErrNoCall) {
		t.Fatalf("nested Step = %v, want ErrNoCall", err)
	}
	if _, ok := idem.StepKey(context.Background()); ok {
		t.Fatal("StepKey outside a step is ok")
	}
	_, err = g.Do(context.Background(), "k2", func(ctx context.Context) (int, error) {
		return idem.Step(ctx, "", func(context.Context) (int, error) { return 1, nil })
	})
	if !errors.Is(err, idem.ErrInvalidKey) {
		t.Fatalf("empty step name = %v, want ErrInvalidKey", err)
	}
}

func TestStepFencingToken(t *testing.T) {
	g, _ := memGuard[int](t)
	_, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
		return idem.Step(ctx, "s", func(ctx context.Context) (int, error) {
			if tok, ok := idem.FencingToken(ctx); !ok || tok != 1 {
				t.Errorf("FencingToken in a step = %d, %v; want the step's attempt 1", tok, ok)
			}
			return 0, nil
		})
	})
	if err != nil {
		t.Fatal(err)
	}
}

// Forget deletes a call and its steps: the next call runs every step again,
// under new StepKeys.
func TestForget(t *testing.T) {
	g, _ := memGuard[int](t, idem.WithLocalCache(10, time.Minute))
	ctx := context.Background()
	s := &twoSteps{}
	if _, err := g.Do(ctx, "k", s.fn); err != nil {
		t.Fatal(err)
	}
	first := s.keys["charge"]
	if err := g.Forget(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if rec := record(t, g, "k"); rec != nil {
		t.Fatalf("record after Forget = %+v", rec)
	}
	s.keys = map[string]string{}
	if v, err := g.Do(ctx, "k", s.fn); err != nil || v != 42 {
		t.Fatalf("Do after Forget = %d, %v", v, err)
	}
	if s.runs["charge"] != 2 || s.runs["email"] != 2 {
		t.Fatalf("runs = %v, want every step run again after Forget", s.runs)
	}
	if s.keys["charge"] == first {
		t.Fatal("a forgotten call's step has the same StepKey as the new call's")
	}
	if err := g.Forget(ctx, "never-used"); err != nil {
		t.Fatalf("Forget of an unknown key = %v", err)
	}
}

// failCallHeartbeats fails every Heartbeat of one key, so the call's claim
// goes stale while its step's claim lives.
type failCallHeartbeats struct {
	storekit.Store
	key string
}

func (s failCallHeartbeats) Heartbeat(ctx context.Context, key, nonce string, ttl time.Duration) error {
	if key == s.key {
		return errors.New("injected heartbeat failure")
	}
	return s.Store.Heartbeat(ctx, key, nonce, ttl)
}

// A step whose owner is alive but lost the call's claim keeps its step
// claim; the new attempt waits for its outcome instead of running it.
func TestStepOwnerAliveAfterTakeover(t *testing.T) {
	mem := mustMemStore(t)
	// A long threshold next to the heartbeat: A's step claim, heartbeated
	// every 100ms, cannot go stale on a slow machine while B waits on it.
	opts := []idem.Option{idem.WithTakeoverAfter(2 * time.Second), idem.WithHeartbeat(100 * time.Millisecond), idem.OnDuplicate(idem.Wait)}
	probe, err := idem.New[int](mem, opts...)
	if err != nil {
		t.Fatal(err)
	}
	callKey := storageKey(t, probe, "k")
	a, err := idem.New[int](failCallHeartbeats{mem, callKey}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	bWaits := make(chan struct{})
	var once sync.Once
	b, err := idem.New[int](mem, append(opts, idem.WithObserver(idem.Observer(func(_ context.Context, e idem.Event) {
		if e.Kind == idem.EventWait && e.StorageKey != callKey { // B waits on the step
			once.Do(func() { close(bWaits) })
		}
	})))...)
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	inStep, release := make(chan struct{}), make(chan struct{})
	fn := func(ctx context.Context) (int, error) {
		return idem.Step(ctx, "slow", func(ctx context.Context) (int, error) {
			if runs.Add(1) == 1 {
				close(inStep)
				<-release // owner A stays in its step
			}
			return 11, ctx.Err()
		})
	}
	aDone := make(chan error, 1)
	go func() { _, err := a.Do(context.Background(), "k", fn); aDone <- err }()
	<-inStep
	// A's call claim lapses (its heartbeats fail); B takes the call over
	// (Wait waits for the stale claim), reaches the step and waits on it.
	type result struct {
		v   int
		err error
	}
	bDone := make(chan result, 1)
	go func() { v, err := b.Do(context.Background(), "k", fn); bDone <- result{v, err} }()
	select {
	case <-bWaits:
	case r := <-bDone:
		t.Fatalf("B finished (%d, %v) while A's step was alive", r.v, r.err)
	}
	close(release)
	r := <-bDone
	if r.err != nil || r.v != 11 || runs.Load() != 1 {
		t.Fatalf("B = %d, %v after %d step runs; want A's 11 and one run", r.v, r.err, runs.Load())
	}
	if err := <-aDone; !errors.Is(err, idem.ErrLostOwnership) {
		t.Fatalf("A = %v, want ErrLostOwnership", err)
	}
}

// A panic in a step's fn releases the step's claim and the call's, and is
// raised again; the retry runs the step again.
func TestStepPanic(t *testing.T) {
	g, _ := memGuard[int](t)
	runs := 0
	fn := func(ctx context.Context) (int, error) {
		return idem.Step(ctx, "p", func(context.Context) (int, error) {
			runs++
			if runs == 1 {
				panic("step boom")
			}
			return 4, nil
		})
	}
	func() {
		defer func() {
			if p := recover(); p != "step boom" {
				t.Fatalf("recovered %v, want the step's panic", p)
			}
		}()
		_, _ = g.Do(context.Background(), "k", fn)
	}()
	if v, err := g.Do(context.Background(), "k", fn); err != nil || v != 4 || runs != 2 {
		t.Fatalf("retry = %d, %v after %d runs; want the step run again", v, err, runs)
	}
}

// Steps work inside a transactional call too: the runner's context carries
// the call.
func TestStepInsideRunTx(t *testing.T) {
	g, _ := memGuard[int](t)
	ctx := txCtx(g)
	runs := 0
	fn := func(ctx context.Context) (int, error) {
		return idem.Step(ctx, "s", func(context.Context) (int, error) { runs++; return 8, nil })
	}
	if v, err := runTx(ctx, g, "k", fakeTx(fn, errors.New("commit failed"))); err == nil {
		t.Fatalf("RunTx = %d, nil; want the commit failure", v)
	}
	if v, err := runTx(ctx, g, "k", fakeTx(fn, nil)); err != nil || v != 8 || runs != 1 {
		t.Fatalf("RunTx = %d, %v after %d step runs; want 8 with the step replayed", v, err, runs)
	}
}
