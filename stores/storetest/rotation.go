package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

// Secrets of the rotation checks: the old one, the new one, and one
// older still.
var (
	secretOld   = []byte("storetest-rotation-secret-old")
	secretNew   = []byte("storetest-rotation-secret-new")
	secretOlder = []byte("storetest-rotation-secret-older")
)

// runRotation checks a secret rotation (idem.WithSecret(active,
// previous...)) on stores made by newStore, with Guards over them: a record
// completed, failed, in progress or stale under the old secret is answered
// by a Guard rotated to (new, old) as if the key had not changed (replay,
// ErrPreviousFailure, ErrPayloadMismatch, ErrInProgress, ErrDuplicate, a
// wait, a takeover under the old key with the fencing token and the steps
// carrying on); Guards configured (old, new) and (new, old) that both claim
// before either looks under the other's key run fn once; and goroutines
// configured as each deploy of a rotation runs them side by side run each
// key once; a call released (an error, a panic, a cancelled context) under
// one order of secrets and retried under the other, or crashed and
// retried by both at once, keeps its finished steps, its StepKeys and a
// rising fencing token; concurrent replays during a rotation are replays.
// A fresh call costs 2 + 2×len(previous) store operations, a replay under
// the active secret 1. Every case runs for a key whose old
// storage key sorts first and one whose new storage key does. It runs on real time (claims go
// stale in about a second).
func runRotation(t *testing.T, newStore func(t *testing.T) storekit.Store) {
	r := &rotation{newStore: newStore, run0: strconv.FormatUint(rand.Uint64(), 36)}
	for _, tc := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"RoundTrips", r.roundTrips},
		{"Replay", r.replay},
		{"PreviousFailure", r.previousFailure},
		{"PayloadMismatch", r.payloadMismatch},
		{"InProgress", r.inProgress},
		{"StaleTakeover", r.staleTakeover},
		{"Tie", r.tie},
		{"RollingDeploy", r.rollingDeploy},
		{"ReleasedSteps", r.releasedSteps},
		{"ReleasedBeforeRotation", r.releasedBeforeRotation},
		{"CrashRacingRetries", r.crashRacingRetries},
		{"ConcurrentReplays", r.concurrentReplays},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t)
		})
	}
}

// runRotationProcesses is runProcesses in the middle of a rotation's
// second deploy: even-numbered children use WithSecret(A, B), odd ones
// WithSecret(B, A), with cfg.Options too, so processes of both
// configurations call every key at once, each goroutine with its own
// Guard. Each key must run once, and every caller get that run's result.
// Use an even cfg.Processes (default 4).
func runRotationProcesses(t *testing.T, cfg ProcessConfig) {
	t.Helper()
	proc, _ := strconv.Atoi(os.Getenv(procEnv)) // 0 in the test process, which only checks
	active, previous := secretOld, secretNew
	if proc%2 == 1 {
		active, previous = previous, active
	}
	cfg.Options = append(append([]idem.Option(nil), cfg.Options...), idem.WithSecret(active, previous))
	runProcesses(t, cfg)
}

// runRotationOrders is runProcesses with three secrets (A, B, C) during a
// rotation, every order of them at once: six children, child i
// configured WithSecret with the i-th permutation of (A, B, C), with
// cfg.Options too. It runs, as subtests, each duplicate policy (Return,
// Raise, Wait), plain and with ProcessConfig.Steps (a step, then a first
// attempt that fails and is retried by a process with another order),
// each under cfg.Namespace (default: a fresh one) with the subtest's name
// appended ("_return_steps"). Each key must run once (and charge once),
// and every caller that gets a result get that run's. cfg.Duplicate and
// cfg.Steps are ignored.
func runRotationOrders(t *testing.T, cfg ProcessConfig) {
	t.Helper()
	if cfg.Namespace == "" {
		cfg.Namespace = "rot" + strconv.FormatUint(rand.Uint64(), 36)
	}
	for _, dup := range []idem.DuplicatePolicy{idem.Return, idem.Raise, idem.Wait} {
		for _, steps := range []bool{false, true} {
			name := string(dup)
			if steps {
				name += "/steps"
			}
			t.Run(name, func(t *testing.T) {
				c := cfg
				c.Duplicate, c.Steps = &dup, steps
				c.Namespace = cfg.Namespace + "_" + strings.ReplaceAll(name, "/", "_")
				rotationOrders(t, c)
			})
		}
	}
}

// rotationOrders is one configuration of runRotationOrders.
func rotationOrders(t *testing.T, cfg ProcessConfig) {
	t.Helper()
	proc, _ := strconv.Atoi(os.Getenv(procEnv)) // 0 in the test process, which only checks
	secrets := [][]byte{secretOld, secretNew, secretOlder}
	perms := [][3]int{{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}}
	p := perms[proc%len(perms)]
	cfg.Processes = len(perms)
	cfg.Options = append(append([]idem.Option(nil), cfg.Options...), idem.WithSecret(secrets[p[0]], secrets[p[1]], secrets[p[2]]))
	runProcesses(t, cfg)
}

// rotation is the state of one runRotation.
type rotation struct {
	newStore func(t *testing.T) storekit.Store
	run0     string // this run's key prefix: stores may be shared
}

// rotGuard returns a Guard over s (as the Guard should see it, when s is
// instrumented) with opts, failing the test on an error.
func rotGuard(t *testing.T, s storekit.Store, opts ...idem.Option) *idem.Guard[string] {
	t.Helper()
	if in, ok := s.(*Instrumented); ok {
		s = in.AsStore()
	}
	g, err := idem.New[string](s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// key returns a key (from prefix) whose storage key under the old secret
// sorts before its storage key under the new one, or after it.
func (r *rotation) key(t *testing.T, prefix string, oldFirst bool) string {
	t.Helper()
	gOld := rotGuard(t, keysOnly{}, idem.WithSecret(secretOld))
	gNew := rotGuard(t, keysOnly{}, idem.WithSecret(secretNew))
	for i := 0; ; i++ {
		k := fmt.Sprint(r.run0, "-", prefix, "-", i)
		if (rotStorageKey(t, gOld, k) < rotStorageKey(t, gNew, k)) == oldFirst {
			return k
		}
	}
}

// keysOnly is a Store for Guards that only derive storage keys.
type keysOnly struct{ storekit.Store }

func rotStorageKey(t *testing.T, g *idem.Guard[string], key string) string {
	t.Helper()
	sk, err := guardinfo.StorageKey(g, key)
	if err != nil {
		t.Fatal(err)
	}
	return sk
}

// rotRecord returns the live record of key under g's active secret, or nil.
func rotRecord(t *testing.T, g *idem.Guard[string], key string) *storekit.Record {
	t.Helper()
	info, _ := guardinfo.Of(g)
	rec, err := info.Store.Get(context.Background(), rotStorageKey(t, g, key))
	if err != nil {
		return nil
	}
	return rec
}

// rotOrders are the two orders of a key's storage keys under the old and
// the new secret: which one sorts first decides which side of a rotation
// yields and which waits, so every case runs in both.
var rotOrders = []struct {
	name     string
	oldFirst bool
}{{"old key sorts first", true}, {"new key sorts first", false}}

// rotFast are timing options that keep waits and takeovers short, with
// room for a slow backend: a heartbeat round trip may take most of a
// second before a claim lapses.
var rotFast = []idem.Option{idem.WithHeartbeat(50 * time.Millisecond), idem.WithTakeoverAfter(time.Second)}

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

// roundTrips: a fresh call during a rotation costs 2 + twice the number
// of previous secrets store operations (under each, a Get of the call and
// one of its steps epoch, which is where a released call's past is
// found); its replay, under the active secret, costs 1.
func (r *rotation) roundTrips(t *testing.T) {
	ctx := context.Background()
	for _, prev := range [][][]byte{nil, {secretOld}, {secretOld, secretOlder}} {
		t.Run(fmt.Sprintf("%d previous", len(prev)), func(t *testing.T) {
			s := Instrument(r.newStore(t))
			g := rotGuard(t, s, idem.WithSecret(secretNew, prev...))
			key := fmt.Sprint(r.run0, "-trips-", len(prev))
			var runs atomic.Int64
			if _, err := g.Do(ctx, key, counted(&runs, "v")); err != nil {
				t.Fatal(err)
			}
			if got, want := s.Total()-s.Count(OpHeartbeat), 2+2*len(prev); got != want {
				t.Errorf("fresh call: %d store operations besides heartbeats, want %d", got, want)
			}
			s.Reset()
			if v, err := g.Do(ctx, key, counted(&runs, "w")); err != nil || v != "v" {
				t.Fatalf("replay = %q, %v", v, err)
			}
			if got := s.Total(); got != 1 {
				t.Errorf("replay under the active secret: %d store operations, want 1", got)
			}
		})
	}
}

// replay: a record completed under the old secret is replayed
// by a Guard rotated to (new, old), without running fn and without a
// record under the new key; the rotation costs Claim + Get + Release.
func (r *rotation) replay(t *testing.T) {
	for _, o := range rotOrders {
		t.Run(o.name, func(t *testing.T) {
			ctx := context.Background()
			s := Instrument(r.newStore(t))
			key := r.key(t, "replay", o.oldFirst)
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
			// A claim is heartbeated while it settles: a Get slower than the
			// heartbeat interval (50ms here) adds a heartbeat, which is not
			// a cost of the replay.
			if c, g, r, tot := s.Count(OpClaim), s.Count(OpGet), s.Count(OpRelease), s.Total()-s.Count(OpHeartbeat); c != 2 || g != 2 || r != 2 || tot != 6 {
				t.Errorf("two replays under the previous secret: %d claims, %d gets, %d releases, %d in all; want 2, 2, 2, 6", c, g, r, tot)
			}
			if rec := rotRecord(t, gRot, key); rec != nil {
				t.Errorf("a live record under the new key after replays: %+v", rec)
			}
		})
	}
}

// previousFailure: a failure stored under the old secret
// (OnFailure(Lock)) is ErrPreviousFailure for the rotated Guard.
func (r *rotation) previousFailure(t *testing.T) {
	for _, o := range rotOrders {
		t.Run(o.name, func(t *testing.T) {
			ctx := context.Background()
			s := r.newStore(t)
			key := r.key(t, "failure", o.oldFirst)
			gOld := rotGuard(t, s, rotOpts(idem.WithSecret(secretOld), idem.OnFailure(idem.Lock))...)
			gRot := rotGuard(t, s, rotOpts(idem.WithSecret(secretNew, secretOld), idem.OnFailure(idem.Lock))...)
			if _, err := gOld.Do(ctx, key, func(context.Context) (string, error) { return "", errors.New("card declined") }); err == nil {
				t.Fatal("old Do: no error")
			}
			var runs atomic.Int64
			_, err := gRot.Do(ctx, key, counted(&runs, "new"))
			var rf *storekit.RecordedFailure
			if !errors.Is(err, storekit.ErrPreviousFailure) || !errors.As(err, &rf) || rf.Message != "card declined" {
				t.Fatalf("rotated Do: %v; want ErrPreviousFailure with the stored message", err)
			}
			if runs.Load() != 0 {
				t.Fatalf("fn ran %d times after a failure stored under the old secret", runs.Load())
			}
		})
	}
}

// payloadMismatch: a record under the old secret with another
// payload is ErrPayloadMismatch, completed or in progress; with the same
// payload it replays.
func (r *rotation) payloadMismatch(t *testing.T) {
	for _, o := range rotOrders {
		t.Run(o.name, func(t *testing.T) {
			ctx := context.Background()
			s := r.newStore(t)
			key := r.key(t, "payload", o.oldFirst)
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

// inProgress: a call running under the old secret is in
// progress for the rotated Guard: ErrInProgress under Return, ErrDuplicate
// and ErrInProgress under Raise, and under Wait its result once it ends.
// In the order where the new key sorts first the rotated Guard's claim is
// the one that would win a tie, so this also checks that it does not run
// fn on sight of a claim that may already be running fn.
func (r *rotation) inProgress(t *testing.T) {
	for _, o := range rotOrders {
		t.Run(o.name, func(t *testing.T) {
			ctx := context.Background()
			s := r.newStore(t)
			key := r.key(t, "live", o.oldFirst)
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
			if rec := rotRecord(t, gRet, key); rec != nil {
				t.Errorf("a live record under the new key: %+v", rec)
			}
		})
	}
}

// staleTakeover: a call under the old secret whose process
// died (its heartbeats and release never arrive) is taken over by the
// rotated Guard under the old key: the fencing token goes on from 1 to 2,
// the step it recorded replays, and the record completes under the old key.
func (r *rotation) staleTakeover(t *testing.T) {
	for _, o := range rotOrders {
		t.Run(o.name, func(t *testing.T) {
			ctx := context.Background()
			s := Instrument(r.newStore(t))
			key := r.key(t, "stale", o.oldFirst)
			gOld := rotGuard(t, s, rotOpts(idem.WithSecret(secretOld))...)
			skOld := rotStorageKey(t, gOld, key)
			var dead atomic.Bool // the old process is gone: none of its writes arrive
			s.Before = func(_ context.Context, op Op, k string) error {
				if dead.Load() && k == skOld && op != OpClaim && op != OpGet {
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
			rec := rotRecord(t, gOld, key)
			if rec == nil || rec.Status != storekit.StatusInProgress || rec.Attempt != 1 {
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
			rec = rotRecord(t, gOld, key)
			if rec == nil || rec.Status != storekit.StatusCompleted || rec.Attempt != 2 {
				t.Errorf("old key's record: %+v, want completed at attempt 2", rec)
			}
			if rec := rotRecord(t, gRot, key); rec != nil {
				t.Errorf("a live record under the new key: %+v", rec)
			}
		})
	}
}

// tie: two processes mid-deploy, one (old, new) and one
// (new, old), both claim under their own active key before either looks
// under the other's (the store holds both Gets until both claims are in):
// they see each other's claim, and exactly one runs fn. Both orders, every
// duplicate policy.
func (r *rotation) tie(t *testing.T) {
	for _, o := range rotOrders {
		for _, pol := range []idem.DuplicatePolicy{idem.Return, idem.Wait} {
			t.Run(fmt.Sprint(o.name, "/", pol), func(t *testing.T) {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				defer cancel()
				s := Instrument(r.newStore(t))
				key := r.key(t, fmt.Sprint("tie-", pol), o.oldFirst)
				var gets sync.WaitGroup
				gets.Add(2)
				var held atomic.Int64
				s.Before = func(_ context.Context, op Op, _ string) error {
					if op == OpGet && held.Add(1) <= 2 {
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
				if pol == idem.Return && runs.Load() == 0 &&
					errors.Is(errs[0], idem.ErrInProgress) && errors.Is(errs[1], idem.ErrInProgress) {
					// Under Return the side that waits for the other's
					// release waits one heartbeat interval at most: on a
					// slow machine (or a polling store) both may answer
					// ErrInProgress and run nothing. That is allowed (at
					// most once; the client retries), and the retry must
					// then run fn, once.
					vals[0], errs[0] = gA.Do(ctx, key, func(context.Context) (string, error) {
						runs.Add(1)
						return "g0", nil
					})
					vals[1], errs[1] = gB.Do(ctx, key, func(context.Context) (string, error) {
						runs.Add(1)
						return "g1", nil
					})
				}
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

// rollingDeploy: many goroutines, each with its own Guard (so
// each goes to the store), call the same keys at once, configured as the
// processes of each deploy of a rotation run side by side; with random
// delays on every store operation to vary the interleavings. Each key runs
// exactly once under Wait, at most once under Return.
func (r *rotation) rollingDeploy(t *testing.T) {
	A, B := secretOld, secretNew
	// Deploys 1 and 3 write under one secret; deploy 2, where the
	// two configurations race, runs under Return too.
	phases := []struct {
		name     string
		cfgs     [][][]byte // secrets, active first
		policies []idem.DuplicatePolicy
	}{
		{"deploy 1: (A) and (A, B)", [][][]byte{{A}, {A, B}}, []idem.DuplicatePolicy{idem.Wait}},
		{"deploy 2: (A, B) and (B, A)", [][][]byte{{A, B}, {B, A}}, []idem.DuplicatePolicy{idem.Wait, idem.Return}},
		{"deploy 3: (B, A) and (B)", [][][]byte{{B, A}, {B}}, []idem.DuplicatePolicy{idem.Wait}},
	}
	for _, ph := range phases {
		for _, pol := range ph.policies {
			t.Run(fmt.Sprint(ph.name, "/", pol), func(t *testing.T) {
				r.run(t, ph.cfgs, pol, 16, 32)
			})
		}
	}
}

func (r *rotation) run(t *testing.T, cfgs [][][]byte, pol idem.DuplicatePolicy, goroutines, keys int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	prefix := fmt.Sprint(r.run0, "-roll-", rand.Uint64())
	s := Instrument(r.newStore(t))
	s.Before = func(context.Context, Op, string) error {
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
				v, err := g.Do(ctx, fmt.Sprint(prefix, "-", k), func(context.Context) (string, error) {
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
