package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

// A call's steps belong to the call, whatever the secret: the rotation
// checks of releases, panics, crashes and racing retries.

// errStepFails is what the first attempt's second step returns.
var errStepFails = errors.New("storetest: the email step fails this time")

// releasedSteps: a call under WithSecret(old, new) runs Step "charge",
// then ends without an outcome (its second step fails, it panics, or its
// context is cancelled), so its claim is released; the retry runs on a
// Guard configured (new, old). The charge is replayed, the second step
// runs under the StepKey the first attempt handed out, and the fencing
// token goes on counting.
func (r *rotation) releasedSteps(t *testing.T) {
	for _, end := range []string{"error", "panic", "cancel"} {
		for _, o := range rotOrders {
			t.Run(end+"/"+o.name, func(t *testing.T) {
				t.Parallel()
				s := r.newStore(t)
				key := r.key(t, "released-"+end, o.oldFirst)
				gAB := rotGuard(t, s, rotOpts(idem.WithSecret(secretOld, secretNew))...)
				gBA := rotGuard(t, s, rotOpts(idem.WithSecret(secretNew, secretOld))...)
				var charges atomic.Int64
				var emailKeys []string
				var tokens []int64
				attempt := func(fail bool) func(context.Context) (string, error) {
					return func(ctx context.Context) (string, error) {
						tok, _ := idem.FencingToken(ctx)
						tokens = append(tokens, tok)
						if _, err := idem.Step(ctx, "charge", func(context.Context) (string, error) {
							charges.Add(1)
							return "charged", nil
						}); err != nil {
							return "", err
						}
						return idem.Step(ctx, "email", func(ctx context.Context) (string, error) {
							k, _ := idem.StepKey(ctx)
							emailKeys = append(emailKeys, k)
							if fail {
								return "", errStepFails
							}
							return "sent", nil
						})
					}
				}
				ctx, cancel := context.WithCancel(context.Background())
				first := attempt(true)
				switch end {
				case "error":
					if _, err := gAB.Do(ctx, key, first); !errors.Is(err, errStepFails) {
						t.Fatalf("first attempt: %v, want its step's error", err)
					}
				case "panic":
					func() {
						defer func() { _ = recover() }()
						_, _ = gAB.Do(ctx, key, func(ctx context.Context) (string, error) {
							_, _ = first(ctx)
							panic("storetest: fn panics")
						})
					}()
				case "cancel":
					_, _ = gAB.Do(ctx, key, func(ctx context.Context) (string, error) {
						_, _ = first(ctx)
						cancel()
						return "", ctx.Err()
					})
				}
				cancel()
				v, err := gBA.Do(context.Background(), key, attempt(false))
				if err != nil || v != "sent" {
					t.Fatalf("the retry under (new, old) = %q, %v", v, err)
				}
				if n := charges.Load(); n != 1 {
					t.Errorf("the charge step ran %d times, want 1", n)
				}
				if len(emailKeys) != 2 || emailKeys[0] != emailKeys[1] {
					t.Errorf("the email step's StepKeys %q, want the same key twice", emailKeys)
				}
				if len(tokens) != 2 || tokens[1] <= tokens[0] {
					t.Errorf("fencing tokens %v, want them to go up", tokens)
				}
			})
		}
	}
}

// releasedBeforeRotation: a call without steps fails under a Guard with
// only the old secret (before the rotation began), so its claim is
// released; the retry runs in the rotation's second deploy, on a Guard
// configured (new, old). Its fencing token goes on counting: the retry
// runs under the old key, where the call's attempts are.
func (r *rotation) releasedBeforeRotation(t *testing.T) {
	for _, o := range rotOrders {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			s := r.newStore(t)
			key := r.key(t, "released-before", o.oldFirst)
			gOld := rotGuard(t, s, rotOpts(idem.WithSecret(secretOld))...)
			gBA := rotGuard(t, s, rotOpts(idem.WithSecret(secretNew, secretOld))...)
			var tokens []int64
			fn := func(fail bool) func(context.Context) (string, error) {
				return func(ctx context.Context) (string, error) {
					tok, _ := idem.FencingToken(ctx)
					tokens = append(tokens, tok)
					if fail {
						return "", errStepFails
					}
					return "done", nil
				}
			}
			for range 2 {
				if _, err := gOld.Do(context.Background(), key, fn(true)); !errors.Is(err, errStepFails) {
					t.Fatalf("an attempt before the rotation: %v, want its error", err)
				}
			}
			if v, err := gBA.Do(context.Background(), key, fn(false)); err != nil || v != "done" {
				t.Fatalf("the retry under (new, old) = %q, %v", v, err)
			}
			if len(tokens) != 3 || tokens[2] <= tokens[1] || tokens[1] <= tokens[0] {
				t.Errorf("fencing tokens %v, want them to go up", tokens)
			}
		})
	}
}

// crashRacingRetries: an owner configured (old, new) dies after its
// charge step; a Guard configured (old, new) and one configured (new, old)
// retry at once. The charge runs once for every key, and both retries get
// the outcome.
func (r *rotation) crashRacingRetries(t *testing.T) {
	for _, o := range rotOrders {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			s := r.newStore(t)
			const keys = 20
			var wg sync.WaitGroup
			for i := range keys {
				wg.Add(1)
				go func() {
					defer wg.Done()
					key := r.key(t, fmt.Sprint("crash-race-", i), o.oldFirst)
					var charges atomic.Int64
					fn := func(ctx context.Context) (string, error) {
						return idem.Step(ctx, "charge", func(context.Context) (string, error) {
							charges.Add(1)
							return "charged", nil
						})
					}
					dead := &owner{Store: s}
					gOwner := rotGuard(t, dead, idem.WithHeartbeat(250*time.Millisecond), idem.WithTakeoverAfter(2*time.Second), idem.WithSecret(secretOld, secretNew))
					_, _ = gOwner.Do(context.Background(), key, func(ctx context.Context) (string, error) {
						if _, err := fn(ctx); err != nil {
							return "", err
						}
						dead.dead.Store(true) // the process dies after its step
						<-ctx.Done()
						return "", ctx.Err()
					})
					var rg sync.WaitGroup
					for _, secrets := range [][][]byte{{secretOld, secretNew}, {secretNew, secretOld}} {
						rg.Add(1)
						go func() {
							defer rg.Done()
							// Heartbeats a quarter second apart, each bounded by that
							// (a backend slowed by 40 concurrent callers must not
							// make the retries' claims lapse).
							g := rotGuard(t, slow{s, 5 * time.Millisecond}, idem.WithHeartbeat(250*time.Millisecond), idem.WithTakeoverAfter(2*time.Second),
								idem.WithSecret(secrets[0], secrets[1]), idem.OnDuplicate(idem.Wait))
							ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
							defer cancel()
							v, err := g.Do(ctx, key, fn)
							// A retry whose own claim could not be refreshed in
							// time (a backend slowed by the other callers) is cut
							// off and says so with ErrLostOwnership: a caller
							// tries again. The charge must still run once.
							for tries := 1; tries < 5 && errors.Is(err, idem.ErrLostOwnership) && ctx.Err() == nil; tries++ {
								v, err = g.Do(ctx, key, fn)
							}
							if err != nil || v != "charged" {
								t.Errorf("key %d: a retry got %q, %v", i, v, err)
							}
						}()
					}
					rg.Wait()
					if n := charges.Load(); n != 1 {
						t.Errorf("key %d: the charge step ran %d times, want 1", i, n)
					}
				}()
			}
			wg.Wait()
		})
	}
}

// concurrentReplays: a key completed under the old secret, then 32
// callers on four Guards configured (new, old), each Return: every one
// gets the stored result, none "in progress" (a caller's settling claim
// under the new key is not a call in progress).
func (r *rotation) concurrentReplays(t *testing.T) {
	for _, o := range rotOrders {
		t.Run(o.name, func(t *testing.T) {
			t.Parallel()
			s := r.newStore(t)
			key := r.key(t, "replays", o.oldFirst)
			var runs atomic.Int64
			gOld := rotGuard(t, s, rotOpts(idem.WithSecret(secretOld))...)
			if _, err := gOld.Do(context.Background(), key, counted(&runs, "old")); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			for range 4 {
				g := rotGuard(t, slow{s, 5 * time.Millisecond}, rotOpts(idem.WithSecret(secretNew, secretOld))...)
				for range 8 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						if v, err := g.Do(context.Background(), key, counted(&runs, "new")); err != nil || v != "old" {
							t.Errorf("a replay during the rotation got %q, %v; want old", v, err)
						}
					}()
				}
			}
			wg.Wait()
			if n := runs.Load(); n != 1 {
				t.Errorf("fn ran %d times, want 1", n)
			}
		})
	}
}

// slow is a store with d added to every operation, as over a network:
// it widens the windows in which concurrent callers interleave.
type slow struct {
	storekit.Store
	d time.Duration
}

func (s slow) Claim(ctx context.Context, r storekit.ClaimRequest) (storekit.ClaimResult, error) {
	time.Sleep(s.d)
	return s.Store.Claim(ctx, r)
}

func (s slow) Get(ctx context.Context, key string) (*storekit.Record, error) {
	time.Sleep(s.d)
	return s.Store.Get(ctx, key)
}

func (s slow) Release(ctx context.Context, key, nonce string) error {
	time.Sleep(s.d)
	return s.Store.Release(ctx, key, nonce)
}

func (s slow) Complete(ctx context.Context, key, nonce string, c storekit.Completion) error {
	time.Sleep(s.d)
	return s.Store.Complete(ctx, key, nonce, c)
}
