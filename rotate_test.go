package idem_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/storetest"
)

var (
	secretOld   = []byte("rotation-test-secret-old")
	secretNew   = []byte("rotation-test-secret-new")
	secretOlder = []byte("rotation-test-secret-older")
)

// rotGuard returns a Guard over s with extra options, failing the test on
// an error.
func rotGuard(t *testing.T, s idem.Store, opts ...idem.Option) *idem.Guard[string] {
	t.Helper()
	g, err := idem.New[string](s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// rotOrders are the two orders of a key's storage keys under the old and
// the new secret: which one sorts first decides which side of a rotation
// yields and which waits, so every case runs in both.
var rotOrders = []struct {
	name     string
	oldFirst bool
}{{"old key sorts first", true}, {"new key sorts first", false}}

// rotKey returns a key (prefixed with prefix) whose storage key under the
// old secret sorts before its storage key under the new one, or after it.
func rotKey(t *testing.T, prefix string, oldFirst bool) string {
	t.Helper()
	s := mustMem()
	gOld := rotGuard(t, s, idem.WithSecret(secretOld))
	gNew := rotGuard(t, s, idem.WithSecret(secretNew))
	for i := 0; ; i++ {
		k := fmt.Sprint(prefix, "-", i)
		if (storageKey(t, gOld, k) < storageKey(t, gNew, k)) == oldFirst {
			return k
		}
	}
}

// rotFast are timing options that keep waits and takeovers short.
var rotFast = []idem.Option{idem.WithHeartbeat(20 * time.Millisecond), idem.WithTakeoverAfter(300 * time.Millisecond)}

func rotOpts(extra ...idem.Option) []idem.Option {
	return append(append([]idem.Option(nil), rotFast...), extra...)
}

// counted returns fn that counts its runs in n and returns v.
func counted(n *atomic.Int64, v string) func(context.Context) (string, error) {
	return func(context.Context) (string, error) {
		n.Add(1)
		return v, nil
	}
}

// TestRotationReplay: a record completed under the old secret is replayed
// by a Guard rotated to (new, old), without running fn and without a
// record under the new key; the rotation costs Claim + Get + Release.
func TestRotationReplay(t *testing.T) {
	for _, o := range rotOrders {
		t.Run(o.name, func(t *testing.T) {
			ctx := context.Background()
			s := storetest.Instrument(mustMem())
			key := rotKey(t, "replay", o.oldFirst)
			gOld := rotGuard(t, s, rotOpts(idem.WithSecret(secretOld))...)
			gRot := rotGuard(t, s, rotOpts(idem.WithSecret(secretNew, secretOld))...)
			var runs atomic.Int64
			if v, err := gOld.Do(ctx, key, counted(&runs, "old")); err != nil || v != "old" {
				t.Fatalf("old Do = %q, %v", v, err)
			}
			s.Reset()
			for range 2 {
				v, err := gRot.Do(ctx, key, counted(&runs, "new"))
				if err != nil || v != "old" {
					t.Fatalf("rotated Do = %q, %v; want the old record's %q", v, err, "old")
				}
			}
			if runs.Load() != 1 {
				t.Fatalf("fn ran %d times, want 1", runs.Load())
			}
			if c, g, r, tot := s.Count(storetest.OpClaim), s.Count(storetest.OpGet), s.Count(storetest.OpRelease), s.Total(); c != 2 || g != 2 || r != 2 || tot != 6 {
				t.Errorf("two replays under the previous secret: %d claims, %d gets, %d releases, %d in all; want 2, 2, 2, 6", c, g, r, tot)
			}
			if rec := record(t, gRot, key); rec != nil {
				t.Errorf("a live record under the new key after replays: %+v", rec)
			}
		})
	}
}

// TestRotationRoundTrips: a fresh call during a rotation costs 2 + the
// number of previous secrets; its replay, under the active secret, costs 1.
func TestRotationRoundTrips(t *testing.T) {
	ctx := context.Background()
	for _, prev := range [][][]byte{nil, {secretOld}, {secretOld, secretOlder}} {
		t.Run(fmt.Sprintf("%d previous", len(prev)), func(t *testing.T) {
			s := storetest.Instrument(mustMem())
			g := rotGuard(t, s, idem.WithSecret(secretNew, prev...))
			var runs atomic.Int64
			if _, err := g.Do(ctx, "fresh", counted(&runs, "v")); err != nil {
				t.Fatal(err)
			}
			if got, want := s.Total(), 2+len(prev); got != want {
				t.Errorf("fresh call: %d round trips, want %d", got, want)
			}
			s.Reset()
			if v, err := g.Do(ctx, "fresh", counted(&runs, "w")); err != nil || v != "v" {
				t.Fatalf("replay = %q, %v", v, err)
			}
			if got := s.Total(); got != 1 {
				t.Errorf("replay under the active secret: %d round trips, want 1", got)
			}
		})
	}
}

// TestRotationPreviousFailure: a failure stored under the old secret
// (OnFailure(Lock)) is ErrPreviousFailure for the rotated Guard.
func TestRotationPreviousFailure(t *testing.T) {
	for _, o := range rotOrders {
		t.Run(o.name, func(t *testing.T) {
			ctx := context.Background()
			s := mustMem()
			key := rotKey(t, "failure", o.oldFirst)
			gOld := rotGuard(t, s, rotOpts(idem.WithSecret(secretOld), idem.OnFailure(idem.Lock))...)
			gRot := rotGuard(t, s, rotOpts(idem.WithSecret(secretNew, secretOld), idem.OnFailure(idem.Lock))...)
			if _, err := gOld.Do(ctx, key, func(context.Context) (string, error) { return "", errors.New("card declined") }); err == nil {
				t.Fatal("old Do: no error")
			}
			var runs atomic.Int64
			_, err := gRot.Do(ctx, key, counted(&runs, "new"))
			var rf *idem.RecordedFailure
			if !errors.Is(err, idem.ErrPreviousFailure) || !errors.As(err, &rf) || rf.Message != "card declined" {
				t.Fatalf("rotated Do: %v; want ErrPreviousFailure with the stored message", err)
			}
			if runs.Load() != 0 {
				t.Fatalf("fn ran %d times after a failure stored under the old secret", runs.Load())
			}
		})
	}
}

// TestRotationPayloadMismatch: a record under the old secret with another
// payload is ErrPayloadMismatch, completed or in progress; with the same
// payload it replays.
func TestRotationPayloadMismatch(t *testing.T) {
	for _, o := range rotOrders {
		t.Run(o.name, func(t *testing.T) {
			ctx := context.Background()
			s := mustMem()
			key := rotKey(t, "payload", o.oldFirst)
			gOld := rotGuard(t, s, rotOpts(idem.WithSecret(secretOld))...)
			gRot := rotGuard(t, s, rotOpts(idem.WithSecret(secretNew, secretOld))...)
			var runs atomic.Int64
			if _, err := gOld.Do(ctx, key, counted(&runs, "old"), idem.Payload("a")); err != nil {
				t.Fatal(err)
			}
			if _, err := gRot.Do(ctx, key, counted(&runs, "new"), idem.Payload("b")); !errors.Is(err, idem.ErrPayloadMismatch) {
				t.Fatalf("other payload: %v, want ErrPayloadMismatch", err)
			}
			if v, err := gRot.Do(ctx, key, counted(&runs, "new"), idem.Payload("a")); err != nil || v != "old" {
				t.Fatalf("same payload: %q, %v; want a replay of %q", v, err, "old")
			}
			// In progress under the old secret, with another payload.
			key2 := key + "-live"
			started, release := make(chan struct{}), make(chan struct{})
			done := make(chan error, 1)
			go func() {
				_, err := gOld.Do(ctx, key2, func(context.Context) (string, error) {
					close(started)
					<-release
					return "old", nil
				}, idem.Payload("a"))
				done <- err
			}()
			<-started
			if _, err := gRot.Do(ctx, key2, counted(&runs, "new"), idem.Payload("b")); !errors.Is(err, idem.ErrPayloadMismatch) {
				t.Errorf("other payload, in progress: %v, want ErrPayloadMismatch", err)
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if runs.Load() != 1 {
				t.Fatalf("fn ran %d times, want 1 (the old Guard's)", runs.Load())
			}
		})
	}
}

// TestRotationInProgress: a call running under the old secret is in
// progress for the rotated Guard: ErrInProgress under Return, ErrDuplicate
// and ErrInProgress under Raise, and under Wait its result once it ends.
// In the order where the new key sorts first the rotated Guard's claim is
// the one that would win a tie, so this also checks that it does not run
// fn on sight of a claim that may already be running fn.
func TestRotationInProgress(t *testing.T) {
	for _, o := range rotOrders {
		t.Run(o.name, func(t *testing.T) {
			ctx := context.Background()
			s := mustMem()
			key := rotKey(t, "live", o.oldFirst)
			gOld := rotGuard(t, s, rotOpts(idem.WithSecret(secretOld))...)
			var runs atomic.Int64
			started, release := make(chan struct{}), make(chan struct{})
			done := make(chan error, 1)
			go func() {
				_, err := gOld.Do(ctx, key, func(context.Context) (string, error) {
					runs.Add(1)
					close(started)
					<-release
					return "old", nil
				})
				done <- err
			}()
			<-started
			gRet := rotGuard(t, s, rotOpts(idem.WithSecret(secretNew, secretOld))...)
			if _, err := gRet.Do(ctx, key, counted(&runs, "new")); !errors.Is(err, idem.ErrInProgress) || errors.Is(err, idem.ErrDuplicate) {
				t.Errorf("Return: %v, want ErrInProgress", err)
			}
			gRaise := rotGuard(t, s, rotOpts(idem.WithSecret(secretNew, secretOld), idem.OnDuplicate(idem.Raise))...)
			if _, err := gRaise.Do(ctx, key, counted(&runs, "new")); !errors.Is(err, idem.ErrInProgress) || !errors.Is(err, idem.ErrDuplicate) {
				t.Errorf("Raise: %v, want ErrDuplicate and ErrInProgress", err)
			}
			gWait := rotGuard(t, s, rotOpts(idem.WithSecret(secretNew, secretOld), idem.OnDuplicate(idem.Wait))...)
			type res struct {
				v   string
				err error
			}
			waited := make(chan res, 1)
			go func() {
				v, err := gWait.Do(ctx, key, counted(&runs, "new"))
				waited <- res{v, err}
			}()
			// The waiter must still be waiting after several heartbeat
			// intervals of the old call (which keeps its claim fresh).
			select {
			case r := <-waited:
				t.Fatalf("Wait returned %q, %v while the old call runs", r.v, r.err)
			case <-time.After(200 * time.Millisecond):
			}
			close(release)
			if err := <-done; err != nil {
				t.Fatal(err)
			}
			if r := <-waited; r.err != nil || r.v != "old" {
				t.Fatalf("Wait: %q, %v; want the old call's %q", r.v, r.err, "old")
			}
			if runs.Load() != 1 {
				t.Fatalf("fn ran %d times, want 1", runs.Load())
			}
			if rec := record(t, gRet, key); rec != nil {
				t.Errorf("a live record under the new key: %+v", rec)
			}
		})
	}
}

// TestRotationStaleTakeover: a call under the old secret whose process
// died (its heartbeats and release never arrive) is taken over by the
// rotated Guard under the old key: the fencing token goes on from 1 to 2,
// the step it recorded replays, and the record completes under the old key.
func TestRotationStaleTakeover(t *testing.T) {
	for _, o := range rotOrders {
		t.Run(o.name, func(t *testing.T) {
			ctx := context.Background()
			s := storetest.Instrument(mustMem())
			key := rotKey(t, "stale", o.oldFirst)
			gOld := rotGuard(t, s, rotOpts(idem.WithSecret(secretOld))...)
			skOld := storageKey(t, gOld, key)
			var dead atomic.Bool // the old process is gone: none of its writes arrive
			s.Before = func(_ context.Context, op storetest.Op, k string) error {
				if dead.Load() && k == skOld && op != storetest.OpClaim && op != storetest.OpGet {
					return errors.New("process died")
				}
				return nil
			}
			var charges atomic.Int64
			charge := func(ctx context.Context) (string, error) {
				return idem.Step(ctx, "charge", func(context.Context) (string, error) {
					return fmt.Sprint("charge-", charges.Add(1)), nil
				})
			}
			_, err := gOld.Do(ctx, key, func(ctx context.Context) (string, error) {
				if _, err := charge(ctx); err != nil {
					return "", err
				}
				dead.Store(true)
				<-ctx.Done() // the lapse cuts it off
				return "", ctx.Err()
			})
			if err == nil {
				t.Fatal("the dead call returned no error")
			}
			dead.Store(false)
			rec := record(t, gOld, key)
			if rec == nil || rec.Status != idem.StatusInProgress || rec.Attempt != 1 {
				t.Fatalf("old record after the crash: %+v, want in progress, attempt 1", rec)
			}
			gRot := rotGuard(t, s, rotOpts(idem.WithSecret(secretNew, secretOld), idem.OnDuplicate(idem.Wait))...)
			var token int64
			v, err := gRot.Do(ctx, key, func(ctx context.Context) (string, error) {
				token, _ = idem.FencingToken(ctx)
				return charge(ctx)
			})
			if err != nil || v != "charge-1" {
				t.Fatalf("rotated Do = %q, %v; want the recorded step %q", v, err, "charge-1")
			}
			if token != 2 {
				t.Errorf("fencing token %d, want 2 (the old claim's attempt + 1)", token)
			}
			if charges.Load() != 1 {
				t.Errorf("the step ran %d times, want 1", charges.Load())
			}
			rec = record(t, gOld, key)
			if rec == nil || rec.Status != idem.StatusCompleted || rec.Attempt != 2 {
				t.Errorf("old key's record: %+v, want completed at attempt 2", rec)
			}
			if rec := record(t, gRot, key); rec != nil {
				t.Errorf("a live record under the new key: %+v", rec)
			}
		})
	}
}

// TestRotationTie: two processes mid-deploy, one (old, new) and one
// (new, old), both claim under their own active key before either looks
// under the other's (the store holds both Gets until both claims are in):
// they see each other's claim, and exactly one runs fn. Both orders, every
// duplicate policy.
func TestRotationTie(t *testing.T) {
	for _, o := range rotOrders {
		for _, pol := range []idem.DuplicatePolicy{idem.Return, idem.Wait} {
			t.Run(fmt.Sprint(o.name, "/", pol), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				s := storetest.Instrument(mustMem())
				key := rotKey(t, "tie", o.oldFirst)
				var gets sync.WaitGroup
				gets.Add(2)
				var held atomic.Int64
				s.Before = func(_ context.Context, op storetest.Op, _ string) error {
					if op == storetest.OpGet && held.Add(1) <= 2 {
						gets.Done()
						gets.Wait()
					}
					return nil
				}
				gA := rotGuard(t, s, rotOpts(idem.WithSecret(secretOld, secretNew), idem.OnDuplicate(pol))...)
				gB := rotGuard(t, s, rotOpts(idem.WithSecret(secretNew, secretOld), idem.OnDuplicate(pol))...)
				var runs atomic.Int64
				var wg sync.WaitGroup
				vals, errs := make([]string, 2), make([]error, 2)
				for i, g := range []*idem.Guard[string]{gA, gB} {
					wg.Go(func() {
						vals[i], errs[i] = g.Do(ctx, key, func(context.Context) (string, error) {
							runs.Add(1)
							time.Sleep(50 * time.Millisecond)
							return fmt.Sprint("g", i), nil
						})
					})
				}
				wg.Wait()
				if runs.Load() != 1 {
					t.Fatalf("fn ran %d times, want 1 (results %q, errors %v)", runs.Load(), vals, errs)
				}
				for i := range 2 {
					switch {
					case errs[i] == nil && vals[i] != "" && (vals[i] == vals[1-i] || errs[1-i] != nil):
					case pol == idem.Return && errors.Is(errs[i], idem.ErrInProgress):
					default:
						t.Errorf("caller %d: %q, %v", i, vals[i], errs[i])
					}
				}
			})
		}
	}
}

// TestRotationRollingDeploy: many goroutines, each with its own Guard (so
// each goes to the store), call the same keys at once, configured as the
// processes of each deploy of a rotation run side by side; with random
// delays on every store operation to vary the interleavings. Each key runs
// exactly once under Wait, at most once under Return.
func TestRotationRollingDeploy(t *testing.T) {
	A, B := secretOld, secretNew
	phases := []struct {
		name string
		cfgs [][][]byte // secrets, active first
	}{
		{"deploy 1: (A) and (A, B)", [][][]byte{{A}, {A, B}}},
		{"deploy 2: (A, B) and (B, A)", [][][]byte{{A, B}, {B, A}}},
		{"deploy 3: (B, A) and (B)", [][][]byte{{B, A}, {B}}},
	}
	for _, ph := range phases {
		for _, pol := range []idem.DuplicatePolicy{idem.Wait, idem.Return} {
			t.Run(fmt.Sprint(ph.name, "/", pol), func(t *testing.T) {
				rotationRun(t, ph.cfgs, pol, 24, 40)
			})
		}
	}
}

func rotationRun(t *testing.T, cfgs [][][]byte, pol idem.DuplicatePolicy, goroutines, keys int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s := storetest.Instrument(mustMem())
	s.Before = func(context.Context, storetest.Op, string) error {
		if n := rand.IntN(4); n > 0 {
			time.Sleep(time.Duration(rand.IntN(300)) * time.Microsecond)
		}
		return nil
	}
	store := s.AsStore()
	runs := make([]atomic.Int64, keys)
	results := make([]sync.Map, keys) // value -> true
	var wg sync.WaitGroup
	var bad atomic.Int64
	for gi := range goroutines {
		sec := cfgs[gi%len(cfgs)]
		g := rotGuard(t, store, rotOpts(idem.WithSecret(sec[0], sec[1:]...), idem.OnDuplicate(pol))...)
		wg.Go(func() {
			for _, k := range rand.Perm(keys) {
				v, err := g.Do(ctx, fmt.Sprint("roll-", k), func(context.Context) (string, error) {
					runs[k].Add(1)
					time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
					return fmt.Sprint("g", gi), nil
				})
				switch {
				case err == nil:
					results[k].Store(v, true)
				case pol == idem.Return && errors.Is(err, idem.ErrInProgress):
				default:
					if bad.Add(1) < 5 {
						t.Errorf("key %d: %v", k, err)
					}
				}
			}
		})
	}
	wg.Wait()
	for k := range keys {
		n := runs[k].Load()
		distinct := 0
		results[k].Range(func(any, any) bool { distinct++; return true })
		switch {
		case n > 1:
			t.Errorf("key %d ran %d times", k, n)
		case pol == idem.Wait && n != 1:
			t.Errorf("key %d ran %d times, want 1", k, n)
		case distinct > 1:
			t.Errorf("key %d: callers got %d different results", k, distinct)
		}
	}
}

// TestWithSecretInvalid: bad secrets are option errors, and one argument
// still compiles.
func TestWithSecretInvalid(t *testing.T) {
	s := mustMem()
	for _, tc := range []struct {
		name string
		opt  idem.Option
	}{
		{"empty active", idem.WithSecret(nil)},
		{"empty previous", idem.WithSecret(secretNew, nil)},
		{"previous is active", idem.WithSecret(secretNew, secretNew)},
		{"previous twice", idem.WithSecret(secretNew, secretOld, secretOld)},
	} {
		if _, err := idem.New[string](s, tc.opt); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", tc.name, err)
		}
	}
	if _, err := idem.New[string](s, idem.WithSecret(secretNew), idem.RequireSecret()); err != nil {
		t.Errorf("one secret: %v", err)
	}
}
