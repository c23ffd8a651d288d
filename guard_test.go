package idem_test

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/storetest"
)

type invoice struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
	Secret string `json:"secret,omitempty"`
}

func newGuard[T any](t *testing.T, s storekit.Store, opts ...idem.Option) *idem.Guard[T] {
	t.Helper()
	g, err := idem.New[T](s, opts...)
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	return g
}

func TestFreshThenReplay(t *testing.T) {
	s := storetest.Instrument(newMem(t))
	g := newGuard[invoice](t, s)
	ctx := context.Background()
	var runs atomic.Int32
	charge := func(ctx context.Context) (invoice, error) {
		runs.Add(1)
		return invoice{ID: "inv_1", Amount: 1999}, nil
	}
	got, err := g.Do(ctx, "order-1", charge)
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if got != (invoice{ID: "inv_1", Amount: 1999}) {
		t.Errorf("got %v, want %v", got, (invoice{ID: "inv_1", Amount: 1999}))
	}
	if got := s.Total(); got != 2 {
		t.Errorf("fresh call = claim + complete: got %v, want %v", got, 2)
	}
	if got := s.Count(storetest.OpClaim); got != 1 {
		t.Errorf("got %v, want %v", got, 1)
	}
	if got := s.Count(storetest.OpComplete); got != 1 {
		t.Errorf("got %v, want %v", got, 1)
	}
	if got := s.Count(storetest.OpHeartbeat); got != 0 {
		t.Errorf("a short call sends no heartbeat: got %v, want %v", got, 0)
	}

	s.Reset()
	got, err = g.Do(ctx, "order-1", charge)
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if got != (invoice{ID: "inv_1", Amount: 1999}) {
		t.Errorf("got %v, want %v", got, (invoice{ID: "inv_1", Amount: 1999}))
	}
	if got := s.Total(); got != 1 {
		t.Errorf("replay = one claim that returns the record: got %v, want %v", got, 1)
	}
	if got := runs.Load(); got != int32(1) {
		t.Errorf("got %v, want %v", got, int32(1))
	}
}

// TestHeartbeatsWhileRunning: a long fn's claim is refreshed while fn
// runs. fn runs until it has seen three heartbeats (a long threshold, so a
// late heartbeat on a loaded machine is no lapse); without heartbeats it
// would wait for its generous deadline and the test fails.
func TestHeartbeatsWhileRunning(t *testing.T) {
	s := storetest.Instrument(newMem(t))
	g := newGuard[int](t, s, idem.WithHeartbeat(20*time.Millisecond), idem.WithTakeoverAfter(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := g.Do(ctx, "slow", func(ctx context.Context) (int, error) {
		for s.Count(storetest.OpHeartbeat) < 3 {
			select {
			case <-ctx.Done():
				return 0, nil
			case <-time.After(5 * time.Millisecond):
			}
		}
		return 1, nil
	})
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if got := s.Count(storetest.OpHeartbeat); got < 3 {
		t.Errorf("heartbeats while fn ran for 30s: got %v, want >= %v", got, 3)
	}
}

func TestConcurrentGoroutinesRunOnce(t *testing.T) {
	for _, policy := range []idem.DuplicatePolicy{idem.Return, idem.Raise, idem.Wait} {
		t.Run(string(policy), func(t *testing.T) {
			s := storetest.Instrument(newMem(t))
			g := newGuard[int](t, s, idem.OnDuplicate(policy))
			for k := 0; k < 20; k++ {
				key := fmt.Sprintf("key-%d", k)
				var runs atomic.Int32
				var wg sync.WaitGroup
				start := make(chan struct{})
				errs := make([]error, 64)
				vals := make([]int, 64)
				for i := 0; i < 64; i++ {
					wg.Add(1)
					go func(i int) {
						defer wg.Done()
						<-start
						vals[i], errs[i] = g.Do(context.Background(), key, func(ctx context.Context) (int, error) {
							runs.Add(1)
							time.Sleep(5 * time.Millisecond)
							return 42, nil
						})
					}(i)
				}
				close(start)
				wg.Wait()
				if got := runs.Load(); got != int32(1) {
					t.Fatalf("fn runs exactly once for %s: got %v, want %v", key, got, int32(1))
				}
				for i, err := range errs {
					switch {
					case err == nil:
						if vals[i] != 42 {
							t.Errorf("got %v, want %v", vals[i], 42)
						}
					case policy == idem.Wait:
						t.Fatalf("Wait caller got %v", err)
					case policy == idem.Return:
						if !errors.Is(err, idem.ErrInProgress) {
							t.Errorf("got %v, want %v", err, idem.ErrInProgress)
						}
					case policy == idem.Raise:
						if !errors.Is(err, idem.ErrDuplicate) {
							t.Errorf("got %v, want %v", err, idem.ErrDuplicate)
						}
					}
				}
			}
		})
	}
}

// Two Guards on one store stand for two processes: nothing is shared but
// the store.
func TestTwoGuardsWait(t *testing.T) {
	for _, name := range []string{"push", "poll"} {
		t.Run(name, func(t *testing.T) {
			var s storekit.Store = newMem(t)
			if name == "poll" {
				s = noWatch{s}
			}
			a := newGuard[string](t, s, idem.OnDuplicate(idem.Wait))
			b := newGuard[string](t, s, idem.OnDuplicate(idem.Wait))
			started := make(chan struct{})
			release := make(chan struct{})
			var runs atomic.Int32
			go func() {
				_, _ = a.Do(context.Background(), "k", func(ctx context.Context) (string, error) {
					runs.Add(1)
					close(started)
					<-release
					return "from-a", nil
				})
			}()
			<-started
			done := make(chan struct{})
			var got string
			var err error
			go func() {
				defer close(done)
				got, err = b.Do(context.Background(), "k", func(ctx context.Context) (string, error) {
					runs.Add(1)
					return "from-b", nil
				})
			}()
			time.Sleep(30 * time.Millisecond)
			close(release)
			<-done
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got != "from-a" {
				t.Errorf("got %v, want %v", got, "from-a")
			}
			if got := runs.Load(); got != int32(1) {
				t.Errorf("got %v, want %v", got, int32(1))
			}
		})
	}
}

// noWatch hides the Watcher of a store, so waiters poll.
type noWatch struct{ storekit.Store }

func TestWaitThenRunAfterUnlockedFailure(t *testing.T) {
	s := newMem(t)
	a := newGuard[string](t, s, idem.OnDuplicate(idem.Wait))
	b := newGuard[string](t, s, idem.OnDuplicate(idem.Wait))
	started, release := make(chan struct{}), make(chan struct{})
	go func() {
		_, _ = a.Do(context.Background(), "k", func(ctx context.Context) (string, error) {
			close(started)
			<-release
			return "", errors.New("boom")
		})
	}()
	<-started
	go func() { time.Sleep(30 * time.Millisecond); close(release) }()
	got, err := b.Do(context.Background(), "k", func(ctx context.Context) (string, error) {
		tok, _ := idem.FencingToken(ctx)
		return fmt.Sprintf("b ran with token %d", tok), nil
	})
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if got != "b ran with token 2" {
		t.Errorf("the released claim is claimed again, attempt counting on: got %v, want %v", got, "b ran with token 2")
	}
}

func TestWaitBoundedByContext(t *testing.T) {
	s := newMem(t)
	a := newGuard[int](t, s)
	b := newGuard[int](t, s, idem.OnDuplicate(idem.Wait))
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	go func() {
		_, _ = a.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
			close(started)
			<-release
			return 1, nil
		})
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := b.Do(ctx, "k", func(ctx context.Context) (int, error) { return 2, nil })
	if !errors.Is(err, idem.ErrInProgress) {
		t.Errorf("got %v, want %v", err, idem.ErrInProgress)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want %v", err, context.DeadlineExceeded)
	}
}

func TestSameProcessWaitFollowerBoundedByOwnContext(t *testing.T) {
	g := newGuard[int](t, newMem(t), idem.OnDuplicate(idem.Wait))
	started, release := make(chan struct{}), make(chan struct{})
	defer close(release)
	go func() {
		_, _ = g.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
			close(started)
			<-release
			return 1, nil
		})
	}()
	<-started
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancel()
	_, err := g.Do(ctx, "k", func(ctx context.Context) (int, error) { return 2, nil })
	if !errors.Is(err, idem.ErrInProgress) {
		t.Errorf("got %v, want %v", err, idem.ErrInProgress)
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("got %v, want %v", err, context.DeadlineExceeded)
	}
}

// A same-process caller with another payload is told ErrPayloadMismatch at
// once, as a caller in another process is, even while the call it would
// coalesce with is waiting on a claim held elsewhere.
func TestSameProcessMismatchNotHeldBehindWait(t *testing.T) {
	s := newMem(t)
	owner := newGuard[int](t, s)
	var c eventCounter
	g := newGuard[int](t, s, idem.OnDuplicate(idem.Wait), idem.WithObserver(c.Observe))
	other := newGuard[int](t, s, idem.OnDuplicate(idem.Wait))
	started, release := make(chan struct{}), make(chan struct{})
	ownerDone := make(chan struct{})
	go func() {
		defer close(ownerDone)
		_, _ = owner.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
			close(started)
			<-release
			return 1, nil
		}, idem.Payload("p1"))
	}()
	<-started
	waiterDone := make(chan struct{})
	go func() {
		defer close(waiterDone)
		v, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 2, nil }, idem.Payload("p1"))
		if err != nil {
			t.Errorf("unexpected error: %v", err)
		}
		if v != 1 {
			t.Errorf("got %v, want %v", v, 1)
		}
	}()
	for deadline := time.Now().Add(30 * time.Second); c.Count(idem.EventWait) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never waited")
		}
	}

	fn := func(ctx context.Context) (int, error) { return 3, nil }
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_, err := other.Do(ctx, "k", fn, idem.Payload("p2"))
	if !errors.Is(err, idem.ErrPayloadMismatch) {
		t.Errorf("another process: got %v, want %v", err, idem.ErrPayloadMismatch)
	}
	// Held behind the waiting follower, this call would end with ctx's
	// deadline instead (the owner does not finish before release).
	_, err = g.Do(ctx, "k", fn, idem.Payload("p2"))
	if !errors.Is(err, idem.ErrPayloadMismatch) {
		t.Errorf("same process: got %v, want %v", err, idem.ErrPayloadMismatch)
	}

	close(release)
	<-ownerDone
	<-waiterDone
}

func TestReturnAndRaiseInProgress(t *testing.T) {
	for _, sameProcess := range []bool{true, false} {
		t.Run(fmt.Sprintf("sameProcess=%v", sameProcess), func(t *testing.T) {
			s := storetest.Instrument(newMem(t))
			owner := newGuard[int](t, s)
			ret, raise := owner, newGuard[int](t, s, idem.OnDuplicate(idem.Raise))
			if !sameProcess {
				ret = newGuard[int](t, s)
			}
			started, release := make(chan struct{}), make(chan struct{})
			done := make(chan struct{})
			go func() {
				defer close(done)
				_, _ = owner.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
					close(started)
					<-release
					return 1, nil
				})
			}()
			<-started
			before := s.Total()
			_, err := ret.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 2, nil })
			if !errors.Is(err, idem.ErrInProgress) {
				t.Errorf("got %v, want %v", err, idem.ErrInProgress)
			}
			if errors.Is(err, idem.ErrDuplicate) {
				t.Errorf("got %v, must not match %v", err, idem.ErrDuplicate)
			}
			if sameProcess {
				if got := s.Total(); got != before {
					t.Errorf("a same-process duplicate does not touch the store: got %v, want %v", got, before)
				}
			}
			_, err = raise.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 2, nil })
			if !errors.Is(err, idem.ErrDuplicate) {
				t.Errorf("got %v, want %v", err, idem.ErrDuplicate)
			}
			if !errors.Is(err, idem.ErrInProgress) {
				t.Errorf("got %v, want %v", err, idem.ErrInProgress)
			}
			var de *idem.DuplicateError
			if !errors.As(err, &de) {
				t.Fatalf("got %v, want a %T", err, de)
			}
			if de.Status != storekit.StatusInProgress {
				t.Errorf("got %v, want %v", de.Status, storekit.StatusInProgress)
			}
			close(release)
			<-done
			_, err = raise.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 2, nil })
			if !errors.Is(err, idem.ErrDuplicate) {
				t.Errorf("got %v, want %v", err, idem.ErrDuplicate)
			}
			if errors.Is(err, idem.ErrInProgress) {
				t.Errorf("got %v, must not match %v", err, idem.ErrInProgress)
			}
			v, err := ret.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 2, nil })
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if v != 1 {
				t.Errorf("got %v, want %v", v, 1)
			}
		})
	}
}

func TestFailurePolicies(t *testing.T) {
	boom := &declineError{code: "card_declined"}
	t.Run("unlock", func(t *testing.T) {
		g := newGuard[int](t, newMem(t))
		var runs int
		fn := func(ctx context.Context) (int, error) {
			runs++
			if runs == 1 {
				return 0, boom
			}
			return 7, nil
		}
		_, err := g.Do(context.Background(), "k", fn)
		if !errors.Is(err, boom) {
			t.Errorf("got %v, want %v", err, boom)
		}
		v, err := g.Do(context.Background(), "k", fn)
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		if v != 7 {
			t.Errorf("got %v, want %v", v, 7)
		}
		if runs != 2 {
			t.Errorf("got %v, want %v", runs, 2)
		}
	})
	t.Run("lock", func(t *testing.T) {
		g := newGuard[int](t, newMem(t), idem.OnFailure(idem.Lock))
		var runs int
		fn := func(ctx context.Context) (int, error) { runs++; return 0, boom }
		_, err := g.Do(context.Background(), "k", fn)
		if !errors.Is(err, boom) {
			t.Errorf("the first caller gets fn's own error: got %v, want %v", err, boom)
		}
		_, err = g.Do(context.Background(), "k", fn)
		if !errors.Is(err, idem.ErrPreviousFailure) {
			t.Errorf("got %v, want %v", err, idem.ErrPreviousFailure)
		}
		var se *idem.RecordedFailure
		if !errors.As(err, &se) {
			t.Fatalf("got %v, want a %T", err, se)
		}
		if se.Message != "declined: card_declined" {
			t.Errorf("got %v, want %v", se.Message, "declined: card_declined")
		}
		if se.Type != "*idem_test.declineError" {
			t.Errorf("got %v, want %v", se.Type, "*idem_test.declineError")
		}
		if runs != 1 {
			t.Errorf("got %v, want %v", runs, 1)
		}
		raise := newGuard[int](t, newMem(t), idem.OnFailure(idem.Lock), idem.OnDuplicate(idem.Raise))
		_, _ = raise.Do(context.Background(), "k", fn)
		_, err = raise.Do(context.Background(), "k", fn)
		if !errors.Is(err, idem.ErrDuplicate) {
			t.Errorf("got %v, want %v", err, idem.ErrDuplicate)
		}
		if !errors.Is(err, idem.ErrPreviousFailure) {
			t.Errorf("got %v, want %v", err, idem.ErrPreviousFailure)
		}
	})
}

type declineError struct{ code string }

func (e *declineError) Error() string { return "declined: " + e.code }

func TestPayloadMismatch(t *testing.T) {
	s := newMem(t)
	g := newGuard[int](t, s, idem.OnFailure(idem.Lock))
	ctx := context.Background()
	one := func(ctx context.Context) (int, error) { return 1, nil }
	_, err := g.Do(ctx, "completed", one, idem.Payload(map[string]any{"amount": 100}))
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	v, err := g.Do(ctx, "completed", one, idem.Payload(map[string]any{"amount": 100}))
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if v != 1 {
		t.Errorf("got %v, want %v", v, 1)
	}
	_, err = g.Do(ctx, "completed", one, idem.Payload(map[string]any{"amount": 101}))
	if !errors.Is(err, idem.ErrPayloadMismatch) {
		t.Errorf("got %v, want %v", err, idem.ErrPayloadMismatch)
	}
	_, err = g.Do(ctx, "completed", one)
	if !errors.Is(err, idem.ErrPayloadMismatch) {
		t.Errorf("no payload does not match a stored payload: got %v, want %v", err, idem.ErrPayloadMismatch)
	}

	_, _ = g.Do(ctx, "failed", func(ctx context.Context) (int, error) { return 0, errors.New("x") }, idem.Payload("a"))
	_, err = g.Do(ctx, "failed", one, idem.Payload("b"))
	if !errors.Is(err, idem.ErrPayloadMismatch) {
		t.Errorf("got %v, want %v", err, idem.ErrPayloadMismatch)
	}

	other := newGuard[int](t, s)
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = g.Do(ctx, "running", func(ctx context.Context) (int, error) { close(started); <-release; return 1, nil }, idem.Payload("a"))
	}()
	<-started
	_, err = other.Do(ctx, "running", one, idem.Payload("b"))
	if !errors.Is(err, idem.ErrPayloadMismatch) {
		t.Errorf("across guards: got %v, want %v", err, idem.ErrPayloadMismatch)
	}
	_, err = g.Do(ctx, "running", one, idem.Payload("b"))
	if !errors.Is(err, idem.ErrPayloadMismatch) {
		t.Errorf("same process: got %v, want %v", err, idem.ErrPayloadMismatch)
	}
	close(release)
	<-done

	_, err = g.Do(ctx, "bad", one, idem.Payload(func() {}))
	if !errors.Is(err, idem.ErrInvalidPayload) {
		t.Errorf("got %v, want %v", err, idem.ErrInvalidPayload)
	}
}

func TestTakeoverOfCrashedClaim(t *testing.T) {
	s := newMem(t)
	// A claim whose owner died: nobody heartbeats it.
	g := newGuard[int](t, s, idem.WithTakeoverAfter(150*time.Millisecond), idem.WithHeartbeat(30*time.Millisecond), idem.OnDuplicate(idem.Wait))
	sk, err := guardinfo.StorageKey(g, "k")
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	// The dead owner used the same threshold: staleness is judged by the
	// owner's stored one.
	_, err = s.Claim(context.Background(), storekit.ClaimRequest{Key: sk, Nonce: "dead-owner", LeaseTTL: time.Hour, TakeoverAfter: 150 * time.Millisecond})
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	var c eventCounter
	g = newGuard[int](t, s, idem.WithTakeoverAfter(150*time.Millisecond), idem.WithHeartbeat(30*time.Millisecond), idem.OnDuplicate(idem.Wait), idem.WithObserver(c.Observe))
	start := time.Now()
	v, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
		tok, ok := idem.FencingToken(ctx)
		if !ok {
			t.Fatalf("ok is false")
		}
		return int(tok), nil
	})
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if v != 2 {
		t.Errorf("the takeover runs with attempt 2: got %v, want %v", v, 2)
	}
	if got := time.Since(start); got < 100*time.Millisecond {
		t.Errorf("got %v, want >= %v", got, 100*time.Millisecond)
	}
	if got := c.Count(idem.EventTakeover); got != int64(1) {
		t.Errorf("got %v, want %v", got, int64(1))
	}
	if got := c.Count(idem.EventWait); got != int64(1) {
		t.Errorf("got %v, want %v", got, int64(1))
	}
	if err := s.Complete(context.Background(), sk, "dead-owner", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Hour}); !errors.Is(err, idem.ErrLostOwnership) {
		t.Errorf("got %v, want %v", err, idem.ErrLostOwnership)
	}
}

// A paused owner (its heartbeats cannot get through) is taken over; when it
// wakes, its heartbeat notices, its fn's context is cancelled with
// ErrLostOwnership, and its completion is refused.
func TestStaleOwnerIsRefused(t *testing.T) {
	mem := newMem(t)
	paused := storetest.Instrument(mem)
	var pause atomic.Bool
	pause.Store(true)
	paused.Before = func(ctx context.Context, op storetest.Op, key string) error {
		if op == storetest.OpHeartbeat && pause.Load() {
			return errors.New("network partition")
		}
		return nil
	}
	opts := []idem.Option{idem.WithTakeoverAfter(150 * time.Millisecond), idem.WithHeartbeat(30 * time.Millisecond)}
	stale := newGuard[string](t, paused, opts...)
	fresh := newGuard[string](t, mem, append(opts, idem.OnDuplicate(idem.Wait))...)

	started, wake := make(chan struct{}), make(chan struct{})
	type out struct {
		v     string
		err   error
		cause error
	}
	res := make(chan out, 1)
	go func() {
		var cause error
		v, err := stale.Do(context.Background(), "k", func(ctx context.Context) (string, error) {
			close(started)
			<-wake // paused: it acts only once it wakes
			<-ctx.Done()
			cause = context.Cause(ctx)
			return "stale", nil
		})
		res <- out{v, err, cause}
	}()
	<-started
	v, err := fresh.Do(context.Background(), "k", func(ctx context.Context) (string, error) {
		tok, _ := idem.FencingToken(ctx)
		if tok != int64(2) {
			t.Errorf("got %v, want %v", tok, int64(2))
		}
		return "fresh", nil
	})
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if v != "fresh" {
		t.Errorf("got %v, want %v", v, "fresh")
	}
	pause.Store(false) // the stale owner wakes
	close(wake)
	r := <-res
	if !errors.Is(r.err, idem.ErrLostOwnership) {
		t.Errorf("got %v, want %v", r.err, idem.ErrLostOwnership)
	}
	if !errors.Is(r.cause, idem.ErrLostOwnership) {
		t.Errorf("fn's context is cancelled with the loss as cause: got %v, want %v", r.cause, idem.ErrLostOwnership)
	}
	got, err := fresh.Do(context.Background(), "k", func(ctx context.Context) (string, error) { return "again", nil })
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if got != "fresh" {
		t.Errorf("the stored result is the new owner's: got %v, want %v", got, "fresh")
	}
}

// An owner whose completion comes after a takeover without any heartbeat
// (a short call with a long pause) is refused at completion.
func TestCompletionRefusedAfterTakeover(t *testing.T) {
	s := newMem(t)
	opts := []idem.Option{idem.WithTakeoverAfter(100 * time.Millisecond), idem.WithHeartbeat(50 * time.Millisecond)}
	b := newGuard[string](t, s, opts...)
	inst := storetest.Instrument(s)
	inst.Before = func(ctx context.Context, op storetest.Op, key string) error {
		if op == storetest.OpHeartbeat {
			return errors.New("paused")
		}
		return nil
	}
	a := newGuard[string](t, inst, opts...)
	_, err := a.Do(context.Background(), "k", func(ctx context.Context) (string, error) {
		time.Sleep(150 * time.Millisecond)
		_, err := b.Do(context.Background(), "k", func(ctx context.Context) (string, error) { return "b", nil })
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return "a", nil
	})
	if !errors.Is(err, idem.ErrLostOwnership) {
		t.Errorf("got %v, want %v", err, idem.ErrLostOwnership)
	}
	v, err := b.Do(context.Background(), "k", func(ctx context.Context) (string, error) { return "c", nil })
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if v != "b" {
		t.Errorf("got %v, want %v", v, "b")
	}
}

func TestPanicReleasesAndRepanics(t *testing.T) {
	g := newGuard[int](t, newMem(t), idem.OnDuplicate(idem.Wait))
	func() {
		defer func() {
			r := recover()
			if r != "kaboom" {
				t.Errorf("got %v, want %v", r, "kaboom")
			}
		}()
		_, _ = g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { panic("kaboom") })
		t.Fatal("Do returned after a panic")
	}()
	v, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
		tok, _ := idem.FencingToken(ctx)
		return int(tok), nil
	})
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if v != 2 {
		t.Errorf("the claim was released, not completed: got %v, want %v", v, 2)
	}
}

func TestGoexitReleases(t *testing.T) {
	g := newGuard[int](t, newMem(t), idem.OnDuplicate(idem.Wait))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = g.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
			runtime.Goexit()
			return 0, nil
		})
	}()
	<-done
	v, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 5, nil })
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if v != 5 {
		t.Errorf("got %v, want %v", v, 5)
	}
}

func TestPanicWakesSameProcessWaiters(t *testing.T) {
	g := newGuard[int](t, newMem(t), idem.OnDuplicate(idem.Wait))
	started := make(chan struct{})
	go func() {
		defer func() { _ = recover() }()
		_, _ = g.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
			close(started)
			time.Sleep(30 * time.Millisecond)
			panic("kaboom")
		})
	}()
	<-started
	v, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 9, nil })
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if v != 9 {
		t.Errorf("got %v, want %v", v, 9)
	}
}

type unencodable struct {
	C any // holds a channel: New accepts the type, encoding fails at run time
}

func TestResultUnavailable(t *testing.T) {
	var c eventCounter
	g := newGuard[unencodable](t, newMem(t), idem.WithObserver(c.Observe))
	var runs int
	fn := func(ctx context.Context) (unencodable, error) { runs++; return unencodable{C: make(chan int)}, nil }
	v, err := g.Do(context.Background(), "k", fn)
	if err != nil {
		t.Fatalf("the first caller gets its result: unexpected error: %v", err)
	}
	if v.C == nil {
		t.Errorf("v.C is nil")
	}
	_, err = g.Do(context.Background(), "k", fn)
	if !errors.Is(err, idem.ErrResultUnavailable) {
		t.Errorf("got %v, want %v", err, idem.ErrResultUnavailable)
	}
	if runs != 1 {
		t.Errorf("the side effect is never re-run because the result could not be stored: got %v, want %v", runs, 1)
	}
	if got := c.Count(idem.EventResultUnavailable); got != int64(2) {
		t.Errorf("got %v, want %v", got, int64(2))
	}
}

func TestCompletionRetriedThenNotRecorded(t *testing.T) {
	inst := storetest.Instrument(newMem(t))
	var fails atomic.Int32
	fails.Store(2)
	inst.Before = func(ctx context.Context, op storetest.Op, key string) error {
		if op == storetest.OpComplete && fails.Add(-1) >= 0 {
			return errors.New("connection reset")
		}
		return nil
	}
	g := newGuard[int](t, inst, idem.WithTakeoverAfter(300*time.Millisecond))
	v, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 1, nil })
	if err != nil {
		t.Fatalf("transient completion failures are retried: unexpected error: %v", err)
	}
	if v != 1 {
		t.Errorf("got %v, want %v", v, 1)
	}
	if got := inst.Count(storetest.OpComplete); got != 3 {
		t.Errorf("got %v, want %v", got, 3)
	}

	fails.Store(1 << 30)
	v, err = g.Do(context.Background(), "k2", func(ctx context.Context) (int, error) { return 2, nil })
	if v != 2 {
		t.Errorf("the caller still gets the result: got %v, want %v", v, 2)
	}
	if !errors.Is(err, idem.ErrNotRecorded) {
		t.Errorf("got %v, want %v", err, idem.ErrNotRecorded)
	}
	var se *idem.StoreError
	if !errors.As(err, &se) {
		t.Errorf("got %v, want a %T", err, se)
	}
}

func TestCompletionReplyLostCountsAsSuccess(t *testing.T) {
	inst := storetest.Instrument(newMem(t))
	var lose atomic.Bool
	lose.Store(true)
	inst.After = func(ctx context.Context, op storetest.Op, key string, err error) error {
		if op == storetest.OpComplete && err == nil && lose.CompareAndSwap(true, false) {
			return errors.New("reply lost") // the write was applied
		}
		return err
	}
	g := newGuard[int](t, inst)
	v, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 3, nil })
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if v != 3 {
		t.Errorf("got %v, want %v", v, 3)
	}
	if got := inst.Count(storetest.OpComplete); got != 2 {
		t.Errorf("got %v, want %v", got, 2)
	}
}

func TestStoreErrorsAreWrapped(t *testing.T) {
	inst := storetest.Instrument(newMem(t))
	down := errors.New("store down")
	inst.Before = func(ctx context.Context, op storetest.Op, key string) error { return down }
	g := newGuard[int](t, inst)
	ran := false
	_, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { ran = true; return 1, nil })
	if !errors.Is(err, down) {
		t.Errorf("got %v, want %v", err, down)
	}
	var se *idem.StoreError
	if !errors.As(err, &se) {
		t.Fatalf("got %v, want a %T", err, se)
	}
	if se.Op != "claim" {
		t.Errorf("got %v, want %v", se.Op, "claim")
	}
	if ran {
		t.Errorf("without a claim fn does not run")
	}
}

func TestSanitize(t *testing.T) {
	s := newMem(t)
	strip := func(v invoice) invoice { v.Secret = ""; return v }
	g := newGuard[invoice](t, s, idem.WithSanitize(strip), idem.OnDuplicate(idem.Wait))
	started, release := make(chan struct{}), make(chan struct{})
	var first invoice
	done := make(chan struct{})
	go func() {
		defer close(done)
		first, _ = g.Do(context.Background(), "k", func(ctx context.Context) (invoice, error) {
			close(started)
			<-release
			return invoice{ID: "i", Amount: 1, Secret: "card-token"}, nil
		})
	}()
	<-started
	follower := make(chan invoice)
	go func() {
		v, _ := g.Do(context.Background(), "k", func(ctx context.Context) (invoice, error) { return invoice{}, nil })
		follower <- v
	}()
	time.Sleep(20 * time.Millisecond)
	close(release)
	<-done
	if first.Secret != "card-token" {
		t.Errorf("the first caller gets the full result: got %v, want %v", first.Secret, "card-token")
	}
	if <-follower != (invoice{ID: "i", Amount: 1}) {
		t.Errorf("a same-process duplicate gets what was stored: got %v, want %v", <-follower, (invoice{ID: "i", Amount: 1}))
	}
	replay, err := g.Do(context.Background(), "k", func(ctx context.Context) (invoice, error) { return invoice{}, nil })
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if replay != (invoice{ID: "i", Amount: 1}) {
		t.Errorf("got %v, want %v", replay, (invoice{ID: "i", Amount: 1}))
	}

	_, err = idem.New[invoice](s, idem.WithSanitize(func(int) int { return 0 }))
	if !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("got %v, want %v", err, idem.ErrInvalidOption)
	}
}

func TestOptionsValidated(t *testing.T) {
	s := newMem(t)
	cases := map[string][]idem.Option{
		"ttl":              {idem.WithTTL(0)},
		"heartbeat":        {idem.WithHeartbeat(-1)},
		"heartbeat>=stale": {idem.WithHeartbeat(time.Second), idem.WithTakeoverAfter(time.Second)},
		"heartbeat>half":   {idem.WithHeartbeat(600 * time.Millisecond), idem.WithTakeoverAfter(time.Second)},
		"takeover":         {idem.WithTakeoverAfter(0)},
		"takeover<1ms":     {idem.WithTakeoverAfter(900 * time.Microsecond)},
		"ttl<1ms":          {idem.WithTTL(500 * time.Microsecond)},
		"secret":           {idem.WithSecret(nil)},
		"production":       {idem.RequireSecret()},
		"dup":              {idem.OnDuplicate(idem.DuplicatePolicy("sometimes"))},
		"fail":             {idem.OnFailure(idem.FailurePolicy("maybe"))},
		"observer":         {idem.WithObserver(nil)},
		"instance empty":   {idem.WithInstanceID("")},
		"instance slash":   {idem.WithInstanceID("pod/1")},
		"instance space":   {idem.WithInstanceID("pod 1")},
		"codec":            {idem.WithCodec(nil)},
		"nil option":       {nil},
	}
	for name, opts := range cases {
		_, err := idem.New[int](s, opts...)
		if !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%v: got %v, want %v", name, err, idem.ErrInvalidOption)
		}
		var oe *storekit.OptionError
		if !errors.As(err, &oe) {
			t.Errorf("%v: got %v, want a %T", name, err, oe)
		}
	}
	_, err := idem.New[int](s, idem.WithTTL(0), nil, idem.WithObserver(nil))
	storetest.CheckOptionErrors(t, err, "WithTTL", "New", "WithObserver")
	if want := "idem: WithTTL: ttl must be at least 1ms"; !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got %q, want it to start with %q", err, want)
	}
	_, err = idem.New[int](nil)
	if !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("got %v, want %v", err, idem.ErrInvalidOption)
	}
	var nilStore *memstore.Store
	_, err = idem.New[int](nilStore)
	if !errors.Is(err, idem.ErrInvalidOption) {
		t.Errorf("got %v, want %v", err, idem.ErrInvalidOption)
	}
	_, err = idem.New[int](s, idem.RequireSecret(), idem.WithSecret([]byte("s3cret-s3cret-s3cret")))
	if err != nil {
		t.Errorf("unexpected error: %v", err)
	}
	g, err := idem.New[int](s, idem.WithTakeoverAfter(90*time.Millisecond))
	if err != nil {
		t.Fatalf("the default heartbeat shrinks to fit a short threshold: unexpected error: %v", err)
	}
	if g == nil {
		t.Errorf("g is nil")
	}
}

// A takeover threshold under a millisecond would be zero in the record's
// millisecond times: every live claim would be stale at once and a
// duplicate would run fn beside the owner. New refuses it.
func TestSubMillisecondThresholdRefused(t *testing.T) {
	s := newMem(t)
	opts := []idem.Option{idem.WithTakeoverAfter(900 * time.Microsecond), idem.WithHeartbeat(400 * time.Microsecond)}
	a, err := idem.New[int](s, opts...)
	if err != nil {
		if !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("got %v, want %v", err, idem.ErrInvalidOption)
		}
		return
	}
	b := newGuard[int](t, s, opts...)
	var runs atomic.Int32
	_, _ = a.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
		runs.Add(1)
		_, _ = b.Do(context.Background(), "k", func(ctx context.Context) (int, error) { runs.Add(1); return 2, nil })
		return 1, nil
	})
	if got := runs.Load(); got != int32(1) {
		t.Errorf("a duplicate of a live call ran fn beside it: got %v, want %v", got, int32(1))
	}
}

func TestStorageKeys(t *testing.T) {
	s := newMem(t)
	plain := newGuard[int](t, s)
	k1, err := guardinfo.StorageKey(plain, "order-1")
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if !regexp.MustCompile(`^idem:[0-9a-f]{64}$`).MatchString(k1) {
		t.Errorf("%q does not match %s", k1, `^idem:[0-9a-f]{64}$`)
	}
	if strings.Contains(k1, "order-1") {
		t.Errorf("%q contains %q", k1, "order-1")
	}
	// Storage keys are a stored format: they must never change between
	// versions. SHA-256 / HMAC-SHA256 over length-prefixed fields
	// ("idem/key/v1", tenant, scope, key), each as 8-byte big-endian length
	// and bytes.
	if k1 != "idem:0660d523cfa4aa8699b3274b1ea7083013996f4ab76f3684a29898ee2440ee24" {
		t.Errorf("got %v, want %v", k1, "idem:0660d523cfa4aa8699b3274b1ea7083013996f4ab76f3684a29898ee2440ee24")
	}
	pinned := newGuard[int](t, s, idem.WithNamespace("t", "s"), idem.WithSecret([]byte("idem-pinned-key-secret")))
	kp, _ := guardinfo.StorageKey(pinned, "order-1")
	if kp != "idem:fa8cc49c0e57601cbe5d91f395e04111863ab676dbc5fe880b967c1a6818e7f0" {
		t.Errorf("got %v, want %v", kp, "idem:fa8cc49c0e57601cbe5d91f395e04111863ab676dbc5fe880b967c1a6818e7f0")
	}
	tenant := newGuard[int](t, s, idem.WithNamespace("tenant-2", ""))
	k2, _ := guardinfo.StorageKey(tenant, "order-1")
	if k2 == k1 {
		t.Errorf("got %v, want a different value", k2)
	}
	scope := newGuard[int](t, s, idem.WithNamespace("", "tenant-2"))
	k3, _ := guardinfo.StorageKey(scope, "order-1")
	if k3 == k2 {
		t.Errorf("tenant and scope are separate fields: got %v, want a different value", k3)
	}
	secret := newGuard[int](t, s, idem.WithSecret([]byte("idem-pinned-key-secret")))
	k4, _ := guardinfo.StorageKey(secret, "order-1")
	if k4 == k1 {
		t.Errorf("got %v, want a different value", k4)
	}
	secret2 := newGuard[int](t, s, idem.WithSecret([]byte("idem-pinned-key-secret-2")))
	k5, _ := guardinfo.StorageKey(secret2, "order-1")
	if k5 == k4 {
		t.Errorf("got %v, want a different value", k5)
	}

	_, err = plain.Do(context.Background(), "", func(ctx context.Context) (int, error) { return 1, nil })
	if !errors.Is(err, idem.ErrInvalidKey) {
		t.Errorf("got %v, want %v", err, idem.ErrInvalidKey)
	}
	var ke *storekit.KeyError
	if !errors.As(err, &ke) {
		t.Errorf("got %v, want a %T", err, ke)
	}
	_, err = guardinfo.StorageKey(plain, string(make([]byte, 4096+1)))
	if !errors.Is(err, idem.ErrInvalidKey) {
		t.Errorf("got %v, want %v", err, idem.ErrInvalidKey)
	}

	// The same key in two namespaces runs twice; in one namespace, once.
	var runs int
	fn := func(ctx context.Context) (int, error) { runs++; return runs, nil }
	_, _ = plain.Do(context.Background(), "x", fn)
	_, _ = tenant.Do(context.Background(), "x", fn)
	_, _ = plain.Do(context.Background(), "x", fn)
	if runs != 2 {
		t.Errorf("got %v, want %v", runs, 2)
	}
}

func TestObserverSeesStorageKeyOnly(t *testing.T) {
	var mu sync.Mutex
	var events []idem.Event
	obs := idem.Observer(func(ctx context.Context, e idem.Event) {
		mu.Lock()
		events = append(events, e)
		mu.Unlock()
	})
	g := newGuard[int](t, newMem(t), idem.WithObserver(obs))
	_, _ = g.Do(context.Background(), "customer-42", func(ctx context.Context) (int, error) { return 1, nil })
	_, _ = g.Do(context.Background(), "customer-42", func(ctx context.Context) (int, error) { return 1, nil })
	_, _ = g.Do(context.Background(), "customer-43", func(ctx context.Context) (int, error) { return 0, errors.New("no") })
	kinds := []idem.EventKind{}
	for _, e := range events {
		kinds = append(kinds, e.Kind)
		if strings.Contains(e.StorageKey, "customer") {
			t.Errorf("%q contains %q", e.StorageKey, "customer")
		}
		if !regexp.MustCompile(`^idem:[0-9a-f]{64}$`).MatchString(e.StorageKey) {
			t.Errorf("%q does not match %s", e.StorageKey, `^idem:[0-9a-f]{64}$`)
		}
	}
	want := []idem.EventKind{idem.EventClaim, idem.EventComplete, idem.EventHit, idem.EventClaim, idem.EventFailure}
	if !slices.Equal(kinds, want) {
		t.Errorf("events: got %v, want %v", kinds, want)
	}
}

func TestWrap(t *testing.T) {
	type req struct {
		User   int
		Amount int
	}
	g := newGuard[string](t, newMem(t))
	var runs int
	create := idem.Wrap(g, "create_invoice", func(ctx context.Context, r req) (string, error) {
		runs++
		return fmt.Sprintf("inv-%d-%d", r.User, r.Amount), nil
	})
	a, err := create(context.Background(), req{1, 100})
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	b, err := create(context.Background(), req{1, 100})
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	c, err := create(context.Background(), req{1, 200})
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if a != "inv-1-100" {
		t.Errorf("got %v, want %v", a, "inv-1-100")
	}
	if b != a {
		t.Errorf("got %v, want %v", b, a)
	}
	if c != "inv-1-200" {
		t.Errorf("got %v, want %v", c, "inv-1-200")
	}
	if runs != 2 {
		t.Errorf("got %v, want %v", runs, 2)
	}
	bad := idem.Wrap(g, "bad", func(ctx context.Context, f func()) (string, error) { return "", nil })
	_, err = bad(context.Background(), func() {})
	if !errors.Is(err, idem.ErrInvalidKey) {
		t.Errorf("got %v, want %v", err, idem.ErrInvalidKey)
	}
}

func TestCorruptStoredResult(t *testing.T) {
	s := newMem(t)
	g := newGuard[string](t, s)
	sk, _ := guardinfo.StorageKey(g, "k")
	_, err := s.Claim(context.Background(), storekit.ClaimRequest{Key: sk, Nonce: "n", LeaseTTL: time.Hour, TakeoverAfter: time.Hour})
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if err := s.Complete(context.Background(), sk, "n", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`{"not":"a string"}`), TTL: time.Hour}); err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	_, err = g.Do(context.Background(), "k", func(ctx context.Context) (string, error) { return "x", nil })
	if !errors.Is(err, idem.ErrCorruptRecord) {
		t.Errorf("got %v, want %v", err, idem.ErrCorruptRecord)
	}
}

// Every goroutine has its own Guard, as if each were a process: only the
// store's atomic claim stands between them.
func TestConcurrentGuardsRunOnce(t *testing.T) {
	s := newMem(t)
	guards := make([]*idem.Guard[int], 64)
	for i := range guards {
		guards[i] = newGuard[int](t, s, idem.OnDuplicate(idem.Wait))
	}
	for k := 0; k < 50; k++ {
		key := fmt.Sprintf("key-%d", k)
		var runs atomic.Int32
		var wg sync.WaitGroup
		start := make(chan struct{})
		for _, g := range guards {
			wg.Add(1)
			go func(g *idem.Guard[int]) {
				defer wg.Done()
				<-start
				v, err := g.Do(context.Background(), key, func(ctx context.Context) (int, error) {
					runs.Add(1)
					return 7, nil
				})
				if err != nil {
					t.Errorf("unexpected error: %v", err)
				}
				if v != 7 {
					t.Errorf("got %v, want %v", v, 7)
				}
			}(g)
		}
		close(start)
		wg.Wait()
		if got := runs.Load(); got != int32(1) {
			t.Fatalf("fn runs exactly once for %s: got %v, want %v", key, got, int32(1))
		}
	}
}

// An owner that cannot refresh its claim (the store is unreachable from it)
// has fn's context cancelled before the claim can go stale, so it does not
// run on beside a new owner; if nobody took over, its outcome is still
// recorded.
func TestHeartbeatLapseCancelsFn(t *testing.T) {
	inst := storetest.Instrument(newMem(t))
	inst.Before = func(ctx context.Context, op storetest.Op, key string) error {
		if op == storetest.OpHeartbeat {
			return errors.New("store unreachable")
		}
		return nil
	}
	g := newGuard[string](t, inst, idem.WithTakeoverAfter(200*time.Millisecond), idem.WithHeartbeat(40*time.Millisecond))
	var cause error
	v, err := g.Do(context.Background(), "k", func(ctx context.Context) (string, error) {
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
			return "stopped", nil
		case <-time.After(time.Minute):
			return "ran on", nil
		}
	})
	if err != nil {
		t.Fatalf("nobody took over, so the outcome is recorded: unexpected error: %v", err)
	}
	if v != "stopped" {
		t.Errorf("got %v, want %v", v, "stopped")
	}
	if !errors.Is(cause, idem.ErrLostOwnership) {
		t.Errorf("got %v, want %v", cause, idem.ErrLostOwnership)
	}
	got, err := g.Do(context.Background(), "k", func(ctx context.Context) (string, error) { return "again", nil })
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if got != "stopped" {
		t.Errorf("got %v, want %v", got, "stopped")
	}
}

// A healthy owner is never stopped by the lapse timer, even with the
// heartbeat interval at its maximum, half the takeover threshold: the
// heartbeat sent after one interval must get the chance to succeed (the
// lapse leaves it half an interval; a margin of a whole interval would cut
// fn off at the very moment that heartbeat is sent, at any scale).
//
// A loaded machine can legitimately send a heartbeat late or run it
// slowly, and then the lapse is right to cut fn off. So a lapse is judged
// by how long the claim had gone unrefreshed (LapseError.Since, counted
// from the send of the last successful refresh): less than the threshold
// less half an interval is a premature cut and fails the test at once;
// more is the machine's doing, and the run is tried again at twice the
// scale. When even the largest scale lapses that way, the machine is too
// slow to tell and the test is skipped.
func TestNoLapseWhileHeartbeatsSucceed(t *testing.T) {
	const maxBeat = 800 * time.Millisecond
	beats := 0 // heartbeats sent over the runs that lapsed
	for beat := 50 * time.Millisecond; ; beat *= 2 {
		le, n := noLapseRun(t, beat)
		beats += n
		if le == nil {
			return
		}
		if cut := 2*beat - beat/2; le.Since < cut-time.Millisecond { // Since is rounded to the millisecond
			t.Fatalf("heartbeat %v, takeover %v: fn's context was cancelled after %v without a successful refresh, before the %v the lapse must allow: %v", beat, 2*beat, le.Since, cut, le)
		}
		t.Logf("heartbeat %v: a late heartbeat let the claim lapse (%v); again at twice the scale", beat, le)
		if beat >= maxBeat {
			if beats == 0 {
				t.Fatalf("no heartbeat was sent at all, at any scale up to an interval of %v", beat)
			}
			t.Skipf("the machine is too slow to judge: heartbeats were late even at an interval of %v", beat)
		}
	}
}

// noLapseRun runs fn for 8 heartbeat intervals with the takeover threshold
// at twice the interval, and returns the lapse that cut fn off, if one did,
// and how many heartbeats were sent.
func noLapseRun(t *testing.T, beat time.Duration) (*idem.LapseError, int) {
	t.Helper()
	inst := storetest.Instrument(newMem(t))
	g := newGuard[int](t, inst, idem.WithHeartbeat(beat), idem.WithTakeoverAfter(2*beat))
	var cause error
	_, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
		select {
		case <-ctx.Done():
			cause = context.Cause(ctx)
		case <-time.After(8 * beat):
		}
		return 1, nil
	})
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if cause == nil {
		// Not vacuous: the claim was refreshed, more than once, while fn
		// ran for 8 intervals.
		if n := inst.Count(storetest.OpHeartbeat); n < 2 {
			t.Errorf("%d heartbeats while fn ran for 8 intervals of %v, want at least 2", n, beat)
		}
		return nil, 0
	}
	var le *idem.LapseError
	if !errors.As(cause, &le) {
		t.Fatalf("fn's context was cancelled by %v, want a lapse or nothing", cause)
	}
	return le, inst.Count(storetest.OpHeartbeat)
}

// badStore answers every claim with a record no store could have written.
type badStore struct {
	storekit.Store
	rec storekit.Record
}

func (s badStore) Claim(ctx context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, error) {
	r := s.rec
	r.Key = req.Key
	return storekit.ClaimResult{Outcome: storekit.Existing, Record: &r}, nil
}

func TestInvalidRecordFromStore(t *testing.T) {
	for name, rec := range map[string]storekit.Record{
		"failed without error": {Status: storekit.StatusFailed, Nonce: "n", Attempt: 1, ExpiresAt: 1 << 62},
		"unknown status":       {Status: "done", Nonce: "n", Attempt: 1, ExpiresAt: 1 << 62},
		"no nonce":             {Status: storekit.StatusCompleted, Attempt: 1, ExpiresAt: 1 << 62},
	} {
		g := newGuard[int](t, badStore{Store: newMem(t), rec: rec})
		_, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 1, nil })
		if !errors.Is(err, idem.ErrCorruptRecord) {
			t.Errorf("%v: got %v, want %v", name, err, idem.ErrCorruptRecord)
		}
	}
}

// A completion the store can never accept is not retried for the whole
// takeover threshold: the smaller completion without the result is tried
// once, and when the store refuses that too, the caller gets its result and
// ErrNotRecorded at once.
func TestPermanentCompletionFailureNotRetried(t *testing.T) {
	inst := storetest.Instrument(newMem(t))
	inst.Before = func(ctx context.Context, op storetest.Op, key string) error {
		if op == storetest.OpComplete {
			return &idem.StoreError{Op: "complete", Err: errors.New("item too large"), Permanent: true}
		}
		return nil
	}
	g := newGuard[int](t, inst, idem.WithTakeoverAfter(time.Minute))
	v, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 4, nil })
	if v != 4 {
		t.Errorf("got %v, want %v", v, 4)
	}
	if !errors.Is(err, idem.ErrNotRecorded) {
		t.Errorf("got %v, want %v", err, idem.ErrNotRecorded)
	}
	if !errors.Is(err, storekit.ErrPermanent) {
		t.Errorf("got %v, want %v", err, storekit.ErrPermanent)
	}
	if got := inst.Count(storetest.OpComplete); got != 2 {
		t.Errorf("the outcome, then the outcome without its result: got %v, want %v", got, 2)
	}
}

// newMem returns an empty memory store.
func newMem(tb testing.TB) *memstore.Store {
	tb.Helper()
	s, err := memstore.New()
	if err != nil {
		tb.Fatal(err)
	}
	return s
}
