package dynamostore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/dynamostore"
)

// TestSkewedGuardClocks: two Guards, each over its own Store on one table,
// whose clocks (WithClock) differ by twice the takeover threshold. The
// store decides with the caller's clock, so this skew is past the limit
// the package documentation states (skew + heartbeat age < threshold):
//   - the Guard ahead takes over the live, heartbeating claim of the Guard
//     behind at once (fn runs twice, under fencing tokens 1 and 2), and the
//     owner is told ErrLostOwnership;
//   - the Guard behind never takes over a live claim of the Guard ahead
//     (skew in that direction only delays takeovers);
//   - a claim released by the Guard ahead looks live to the Guard behind
//     until the latter's clock reaches the release time.
//
// The clocks are fake and stand still unless advanced, so nothing here
// depends on timing: the heartbeats (every 20ms of real time) all write the
// same heartbeat_at.
func TestSkewedGuardClocks(t *testing.T) {
	const takeover = 30 * time.Second
	skew := 2 * takeover
	base := newFakeClock()
	behindEnv := newEnv(t, dynamostore.WithClock(base.Now))
	ahead := mustNew(t, behindEnv.client, testTable, dynamostore.WithKeyPrefix(behindEnv.prefix),
		dynamostore.WithClock(func() time.Time { return base.Now().Add(skew) }))
	opts := []idem.Option{idem.WithTakeoverAfter(takeover), idem.WithHeartbeat(20 * time.Millisecond)}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	k := skewedGuards{
		ctx:      ctx,
		takeover: takeover,
		base:     base,
		behind:   newGuard[int64](t, behindEnv.store, opts...),
		ahead:    newGuard[int64](t, ahead, opts...),
	}
	k.aheadTakesOverLive(t)
	k.behindLeavesLive(t)
	k.behindReclaimsReleased(t)
}

// skewedGuards are two Guards on one table whose store clocks are skew
// apart: behind runs on base, ahead on base + skew.
type skewedGuards struct {
	ctx           context.Context
	takeover      time.Duration
	base          *fakeClock
	behind, ahead *idem.Guard[int64]
}

func skewToken(ctx context.Context) int64 { tok, _ := idem.FencingToken(ctx); return tok }

// aheadTakesOverLive checks the Guard ahead takes over a live claim of the
// Guard behind, whose owner is told ErrLostOwnership.
func (k skewedGuards) aheadTakesOverLive(t *testing.T) {
	// A live claim of the Guard behind, heartbeating.
	var runs atomic.Int32
	started, release := make(chan struct{}), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := k.behind.Do(k.ctx, "live", func(ctx context.Context) (int64, error) {
			runs.Add(1)
			close(started)
			select {
			case <-release:
			case <-ctx.Done():
			}
			return skewToken(ctx), context.Cause(ctx)
		})
		done <- err
	}()
	<-started
	// Its heartbeat_at is the behind clock's now; the Guard ahead sees it
	// 2 x threshold old, so stale.
	v, err := k.ahead.Do(k.ctx, "live", func(ctx context.Context) (int64, error) {
		runs.Add(1)
		return skewToken(ctx), nil
	})
	if err != nil || v != 2 {
		t.Fatalf("the Guard ahead by 2 x takeover: %d, %v; want a takeover under token 2", v, err)
	}
	if n := runs.Load(); n != 2 {
		t.Fatalf("fn ran %d times; past the skew limit the live claim is taken over", n)
	}
	if err := <-done; !errors.Is(err, storekit.ErrLostOwnership) {
		t.Fatalf("the owner behind: %v, want ErrLostOwnership", err)
	}
	close(release)
}

// behindLeavesLive checks the Guard behind leaves a live claim of the Guard
// ahead alone.
func (k skewedGuards) behindLeavesLive(t *testing.T) {
	// The other direction: a live claim of the Guard ahead is not taken
	// over by the Guard behind, even once the behind clock has moved by
	// more than the threshold.
	started2, release2 := make(chan struct{}), make(chan struct{})
	done2 := make(chan error, 1)
	go func() {
		_, err := k.ahead.Do(k.ctx, "live-ahead", func(ctx context.Context) (int64, error) {
			close(started2)
			<-release2
			return 1, nil
		})
		done2 <- err
	}()
	<-started2
	for _, step := range []time.Duration{0, k.takeover, k.takeover / 2} {
		k.base.Advance(step)
		if _, err := k.behind.Do(k.ctx, "live-ahead", func(context.Context) (int64, error) { return -1, nil }); !errors.Is(err, idem.ErrInProgress) {
			t.Fatalf("the Guard behind, after %v: %v, want ErrInProgress", step, err)
		}
	}
	close(release2)
	if err := <-done2; err != nil {
		t.Fatal(err)
	}
}

// behindReclaimsReleased checks the Guard behind re-claims a record the
// Guard ahead released.
func (k skewedGuards) behindReclaimsReleased(t *testing.T) {
	// Released by the Guard ahead (Unlock): a released record's expires_at
	// is 0, in the past at every clock, so the Guard behind re-claims it at
	// once, whatever the skew.
	if _, err := k.ahead.Do(k.ctx, "released", func(context.Context) (int64, error) { return 0, errors.New("boom") }); err == nil {
		t.Fatal("the failing call succeeded")
	}
	v, err := k.behind.Do(k.ctx, "released", func(ctx context.Context) (int64, error) { return skewToken(ctx), nil })
	if err != nil || v != 2 {
		t.Fatalf("a claim released ahead, seen from behind: %d, %v; want a re-claim under token 2", v, err)
	}
}

// TestSkewLimit pins the limit the package documentation states: a caller
// whose clock is ahead of the owner's by s takes over a claim whose last
// heartbeat is h old (owner's clock) exactly when s + h >= the takeover
// threshold. With the defaults (30s threshold, 5s heartbeat), a skew of 25s
// is survived by a claim heartbeating on time, and not one millisecond of
// heartbeat delay more.
func TestSkewLimit(t *testing.T) {
	const takeover, heartbeat = 30 * time.Second, 5 * time.Second
	skew := takeover - heartbeat
	base := newFakeClock()
	e := newEnv(t, dynamostore.WithClock(base.Now))
	ahead := mustNew(t, e.client, testTable, dynamostore.WithKeyPrefix(e.prefix),
		dynamostore.WithClock(func() time.Time { return base.Now().Add(skew) }))
	ctx := context.Background()
	key := storageKey()
	req := func(nonce string) storekit.ClaimRequest {
		return storekit.ClaimRequest{Key: key, Nonce: nonce, PayloadHash: "ph", LeaseTTL: time.Hour, TakeoverAfter: takeover}
	}
	mustClaim(t, e.store, req("owner"), storekit.Claimed)
	for range 3 { // heartbeats on time: never stale for the caller ahead
		base.Advance(heartbeat - time.Millisecond)
		mustClaim(t, ahead, req("ahead"), storekit.Existing)
		if err := e.store.Heartbeat(ctx, key, "owner", time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	base.Advance(heartbeat - time.Millisecond)
	mustClaim(t, ahead, req("ahead"), storekit.Existing)
	base.Advance(time.Millisecond) // s + h = threshold
	if rec := mustClaim(t, ahead, req("ahead"), storekit.TookOver); rec.Attempt != 2 {
		t.Fatalf("took over %+v", rec)
	}
	if err := e.store.Heartbeat(ctx, key, "owner", time.Hour); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Fatalf("the owner's heartbeat after the takeover: %v", err)
	}
}
