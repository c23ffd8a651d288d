package dynamostore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

func newGuard[T any](t *testing.T, s storekit.Store, opts ...idem.Option) *idem.Guard[T] {
	t.Helper()
	g, err := idem.New[T](s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestGuardRoundTrips(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	g := newGuard[int](t, e.store)
	runs := 0
	fn := func(ctx context.Context) (int, error) {
		runs++
		if tok, ok := idem.FencingToken(ctx); !ok || tok != 1 {
			t.Errorf("fencing token %d, %v", tok, ok)
		}
		return 42, nil
	}
	v, err := g.Do(ctx, "order-1", fn, idem.Payload("p"))
	if err != nil || v != 42 {
		t.Fatalf("fresh: %v, %v", v, err)
	}
	wantOps(t, e, "PutItem", "UpdateItem") // claim, complete
	for range 3 {
		v, err = g.Do(ctx, "order-1", fn, idem.Payload("p"))
		if err != nil || v != 42 {
			t.Fatalf("replay: %v, %v", v, err)
		}
		wantOps(t, e, "PutItem") // the refused claim carries the record
	}
	if _, err := g.Do(ctx, "order-1", fn, idem.Payload("other")); !errors.Is(err, idem.ErrPayloadMismatch) {
		t.Fatalf("other payload: %v", err)
	}
	wantOps(t, e, "PutItem")
	if runs != 1 {
		t.Fatalf("fn ran %d times", runs)
	}

	// A failure kept under Lock: 2 requests, then 1 per replay.
	locked := newGuard[int](t, e.store, idem.OnFailure(idem.Lock))
	boom := errors.New("card declined")
	if _, err := locked.Do(ctx, "order-2", func(context.Context) (int, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Fatalf("failing call: %v", err)
	}
	wantOps(t, e, "PutItem", "UpdateItem")
	_, err = locked.Do(ctx, "order-2", fn)
	var se *storekit.RecordedFailure
	if !errors.Is(err, storekit.ErrPreviousFailure) || !errors.As(err, &se) || se.Message != "card declined" {
		t.Fatalf("replayed failure: %v", err)
	}
	wantOps(t, e, "PutItem")

	// A failure under Unlock releases (claim, release); the retry runs
	// again under the next fencing token. The store remembers the keys it
	// released, so the retry's claim goes straight to the update that
	// re-claims the released record.
	if _, err := g.Do(ctx, "order-3", func(context.Context) (int, error) { return 0, boom }); !errors.Is(err, boom) {
		t.Fatalf("failing call: %v", err)
	}
	wantOps(t, e, "PutItem", "UpdateItem")
	time.Sleep(2 * time.Millisecond) // the release set expires_at to its own now
	v, err = g.Do(ctx, "order-3", func(ctx context.Context) (int, error) {
		tok, _ := idem.FencingToken(ctx)
		return int(tok), nil
	})
	if err != nil || v != 2 {
		t.Fatalf("retry after release: token %d, %v", v, err)
	}
	wantOps(t, e, "UpdateItem", "UpdateItem")
}

func TestGuardTakeoverOfACrashedOwner(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	g := newGuard[int64](t, e.store, idem.WithTakeoverAfter(300*time.Millisecond), idem.WithHeartbeat(100*time.Millisecond))
	sk, err := guardinfo.StorageKey(g, "job-7")
	if err != nil {
		t.Fatal(err)
	}
	// An owner that claimed and died without heartbeating.
	mustClaim(t, e.store, storekit.ClaimRequest{Key: sk, Nonce: "crashed", LeaseTTL: time.Hour, TakeoverAfter: 300 * time.Millisecond}, storekit.Claimed)
	if _, err := g.Do(ctx, "job-7", func(context.Context) (int64, error) { return 0, nil }); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("while the claim is fresh: %v", err)
	}
	time.Sleep(400 * time.Millisecond)
	e.log.Take()
	v, err := g.Do(ctx, "job-7", func(ctx context.Context) (int64, error) {
		tok, _ := idem.FencingToken(ctx)
		return tok, nil
	})
	if err != nil || v != 2 {
		t.Fatalf("takeover: token %d, %v", v, err)
	}
	// The takeover is the claim's second path: the PutItem refused with
	// the stale record, then the update that takes it over (the guard's
	// lease is longer than the crashed claim's, so the expiry is not kept);
	// fn is far shorter than the heartbeat interval.
	wantOps(t, e, "PutItem", "UpdateItem", "UpdateItem")
	err = e.store.Complete(ctx, sk, "crashed", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("1"), TTL: time.Hour})
	if !errors.Is(err, storekit.ErrLostOwnership) {
		t.Fatalf("crashed owner's late complete: %v", err)
	}
	if v, err := g.Do(ctx, "job-7", func(context.Context) (int64, error) { return -1, nil }); err != nil || v != 2 {
		t.Fatalf("replay: %d, %v", v, err)
	}
}

func TestGuardLostOwnershipCancelsFn(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	// The loss is found by the next heartbeat (50ms); the takeover threshold
	// only bounds the lapse, which must not come first however slow
	// DynamoDB Local is (a 600ms one lapsed once under load: "claim not
	// refreshed for 575ms").
	g := newGuard[int](t, e.store, idem.WithTakeoverAfter(30*time.Second), idem.WithHeartbeat(50*time.Millisecond))
	sk, _ := guardinfo.StorageKey(g, "k")
	started := make(chan struct{})
	done := make(chan error, 1)
	var cause error
	go func() {
		_, err := g.Do(ctx, "k", func(ctx context.Context) (int, error) {
			close(started)
			<-ctx.Done()
			cause = context.Cause(ctx)
			return 1, nil
		})
		done <- err
	}()
	<-started
	// Someone else now owns the key (as after a takeover).
	if err := e.store.Delete(ctx, sk); err != nil {
		t.Fatal(err)
	}
	mustClaim(t, e.store, storekit.ClaimRequest{Key: sk, Nonce: "other", LeaseTTL: time.Hour, TakeoverAfter: time.Hour}, storekit.Claimed)
	select {
	case err := <-done:
		if !errors.Is(err, storekit.ErrLostOwnership) || !errors.Is(cause, storekit.ErrLostOwnership) {
			t.Fatalf("Do: %v; fn's context cause: %v", err, cause)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("fn was not cancelled after losing ownership")
	}
	if rec, err := e.store.Get(ctx, sk); err != nil || rec.Nonce != "other" || rec.Status != storekit.StatusInProgress {
		t.Fatalf("the new owner's record: %+v, %v", rec, err)
	}
}
