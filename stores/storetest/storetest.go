// Package storetest is the conformance suite for storekit.Store
// implementations. A store's test calls Run once, with a Harness that says
// how to make the store and what it supports:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{
//			NewStore: func(t *testing.T) storekit.Store { return mystore.New(...) },
//			Rotation: true,
//		})
//	}
//
// Run runs every suite the Harness declares as a subtest of a stable name
// (RealTime, Clock, List, Purge, Rotation, Processes, RotationProcesses,
// RotationOrders, StepCrash) and skips, saying why, the ones it leaves out.
// Every store in this repository runs it against its real backend, and a
// third-party store can run it too.
//
// NewStore is called once per subtest; stores it returns may share a
// backend, since every subtest uses fresh random keys. On real time the
// suite sleeps for short, fixed periods (a few hundred milliseconds) to let
// claims go stale and records expire, and takes a few seconds per store. A
// store that takes a clock declares NewStoreWithClock too: the suite then
// hands each subtest's store a Clock and advances it, and sleeps not at
// all:
//
//	NewStoreWithClock: func(t *testing.T, c *storetest.Clock) storekit.Store {
//		return mystore.New(mystore.WithClock(c.Now))
//	},
//
// Corrupt hands the suite a way to damage a stored record, so that it
// checks the record is reported as storekit.ErrCorruptRecord and never
// overwritten.
//
// The process suites (Processes, RotationProcesses, RotationOrders,
// StepCrash) re-run the test binary as several OS processes whose Guards
// share the store, each child running only the subtest that started it.
// Instrument wraps a store to count its operations and to inject faults;
// hand a Guard its AsStore, which is an storekit.Watcher exactly when the
// wrapped store is one.
//
// A store that removes expired records (a Purge method: Purger) must never
// remove a live one: a record is removed only once its ExpiresAt plus the
// store's retention has passed at the moment of removal, on the store's
// clock, judged by the same rule its other operations use. The suite then
// checks that Purge keeps every live record (fresh, stale, heartbeated,
// completed, failed; PurgeKeepsLive), that a claim, a heartbeat or a
// completion racing Purge on the same key never loses (PurgeRace: rounds
// of expired keys, each claimed, heartbeated and completed beside two
// Purges; a second claim must then find the first owner's record, else fn
// would run twice), and, given the store's retention (Harness.Purge), that
// Purge keeps an expired record until its retention has passed and
// removes it after (PurgeAfterRetention). A clean-up that lists expired
// records and then deletes them by key fails PurgeRace. On real time the
// races need records that expire past retention within the test: declare
// a Purge run on a store built with a short retention (0, or a few
// seconds) besides NewStore with its defaults.
//
// The suite depends on the standard library only.
package storetest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"
)

type suite struct {
	corrupt   func(t *testing.T, s storekit.Store, key string)
	mustWatch bool // the store must be a storekit.Watcher
	skew      time.Duration
	clock     *Clock // nil: the store runs on real time and the suite sleeps
	native    bool   // completed and failed records expire natively at expires_at
	// retention is the store's, when retentionKnown (a Purge run).
	retention      time.Duration
	retentionKnown bool
}

// sleep lets d pass: on the suite's clock when the store reads it, else
// in real time.
func (su *suite) sleep(d time.Duration) {
	if su.clock != nil {
		su.clock.Advance(d)
		return
	}
	time.Sleep(d)
}

func (su *suite) now() time.Time {
	if su.clock != nil {
		return su.clock.Now()
	}
	return time.Now()
}

// claimOutcome claims and returns the result, failing on an error.
func claimOutcome(t *testing.T, s storekit.Store, r storekit.ClaimRequest) storekit.ClaimResult {
	t.Helper()
	res, err := s.Claim(ctxT(t), r)
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if res.Record == nil {
		t.Fatalf("res.Record is nil")
	}
	return res
}

// withSlack runs a check that needs a claim to still be live when a later
// claim reaches the store. On real time a slow machine can overrun that
// window, and a takeover then is the store's right, not its fault: try
// measures the window and returns false when it was overrun, and the check
// runs again, on a fresh key, with every duration scaled up.
func (su *suite) withSlack(t *testing.T, try func(scale time.Duration) bool) {
	t.Helper()
	for scale := time.Duration(1); scale <= 16; scale *= 2 {
		if try(scale) {
			return
		}
		t.Logf("the machine overran the check's window; again with durations x%d", 2*scale)
	}
	t.Fatal("the machine overran the check's window even with durations x16")
}

// NewKey returns a fresh random storage key.
func NewKey() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return storekit.StorageKeyPrefix + hex.EncodeToString(b[:])
}

// NewNonce returns a fresh random nonce.
func NewNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

const (
	lease    = 10 * time.Second
	takeover = 300 * time.Millisecond
	stale    = 450 * time.Millisecond // sleep that makes a claim stale
)

func req(key, nonce, payload string) storekit.ClaimRequest {
	return storekit.ClaimRequest{Key: key, Nonce: nonce, PayloadHash: payload, LeaseTTL: lease, TakeoverAfter: takeover}
}

// subtest is one check of the suite.
type subtest struct {
	name string
	fn   func(su *suite, t *testing.T, s storekit.Store)
}

// runCore runs the store's checks (and, on real time, the lapse checks)
// against stores made by newStore, with the settings of su.
func runCore(t *testing.T, newStore func(t *testing.T, clock *Clock) storekit.Store, withClock bool, su suite) {
	tests := []subtest{
		{"ClaimNew", (*suite).claimNew},
		{"ClaimExistingLive", (*suite).claimExistingLive},
		{"ClaimRetrySameNonce", (*suite).claimRetrySameNonce},
		{"TakeoverStale", (*suite).takeoverStale},
		{"NoTakeoverAfterHeartbeat", (*suite).noTakeoverAfterHeartbeat},
		{"OwnersThresholdDecides", (*suite).ownersThresholdDecides},
		{"NoTakeoverOnPayloadMismatch", (*suite).noTakeoverOnPayloadMismatch},
		{"NoTakeoverOfCompleted", (*suite).noTakeoverOfCompleted},
		{"NonceFencing", (*suite).nonceFencing},
		{"Heartbeat", (*suite).heartbeat},
		{"Complete", (*suite).complete},
		{"CompleteFailed", (*suite).completeFailed},
		{"CompleteRetrySameNonce", (*suite).completeRetry},
		{"BinaryResult", (*suite).binaryResult},
		{"ClaimRecordIsTheCallers", (*suite).claimRecordIsTheCallers},
		{"Release", (*suite).release},
		{"Expiry", (*suite).expiry},
		{"GetMissing", (*suite).getMissing},
		{"Delete", (*suite).delete},
		{"ConcurrentClaimOneKey", (*suite).concurrentClaim},
		{"ConcurrentTakeover", (*suite).concurrentTakeover},
		{"ConcurrentManyKeys", (*suite).concurrentManyKeys},
		{"Watch", (*suite).watch},
		{"CorruptRecord", (*suite).corruptRecord},
		{"ContextCancelled", (*suite).contextCancelled},
		{"StepsRunOnce", (*suite).stepsRunOnce},
		{"StepsCrashAfterStep", stepsCrash("after1")},
		{"StepsCrashInStep", stepsCrash("in2")},
		{"StepsStaleOwner", (*suite).stepsStaleOwner},
		{"StepsForget", (*suite).stepsForget},
	}
	tests = append(tests, purgeTests...)
	if !withClock {
		tests = append(tests, lapseTests...)
	}
	runTests(t, newStore, withClock, su, tests)
}

// runTests runs tests as parallel subtests, each on a store of its own
// made by newStore (with a Clock of its own when withClock).
func runTests(t *testing.T, newStore func(t *testing.T, clock *Clock) storekit.Store, withClock bool, su suite, tests []subtest) {
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sub := su
			if withClock {
				sub.clock = NewClock()
				sub.skew = 0
			}
			tc.fn(&sub, t, newStore(t, sub.clock))
		})
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func (su *suite) near(t *testing.T, ms int64, what string) {
	t.Helper()
	d := su.now().Sub(time.UnixMilli(ms))
	if got := d.Abs(); got >= su.skew+time.Millisecond {
		t.Errorf("%s is %v away from now: got %v, want < %v", what, d, got, su.skew+time.Millisecond)
	}
}

func mustClaim(t *testing.T, s storekit.Store, r storekit.ClaimRequest, want storekit.ClaimOutcome) *storekit.Record {
	t.Helper()
	res := claimOutcome(t, s, r)
	if res.Outcome != want {
		t.Fatalf("claim outcome: got %v, want %v", res.Outcome, want)
	}
	return res.Record
}

func (su *suite) claimNew(t *testing.T, s storekit.Store) {
	key, nonce := NewKey(), NewNonce()
	rec := mustClaim(t, s, req(key, nonce, "ph1"), storekit.Claimed)
	if rec.Key != key {
		t.Errorf("got %v, want %v", rec.Key, key)
	}
	if rec.Status != storekit.StatusInProgress {
		t.Errorf("got %v, want %v", rec.Status, storekit.StatusInProgress)
	}
	if rec.Nonce != nonce {
		t.Errorf("got %v, want %v", rec.Nonce, nonce)
	}
	if rec.Attempt != int64(1) {
		t.Errorf("got %v, want %v", rec.Attempt, int64(1))
	}
	if rec.PayloadHash != "ph1" {
		t.Errorf("got %v, want %v", rec.PayloadHash, "ph1")
	}
	su.near(t, rec.StartedAt, "started_at")
	if rec.HeartbeatAt != rec.StartedAt {
		t.Errorf("got %v, want %v", rec.HeartbeatAt, rec.StartedAt)
	}
	if d := rec.ExpiresAt - (rec.StartedAt + lease.Milliseconds()); d > 5 || d < -5 {
		t.Errorf("got %v, want %v ± %v", rec.ExpiresAt, rec.StartedAt+lease.Milliseconds(), 5)
	}
	got, err := s.Get(ctxT(t), key)
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if got.Nonce != rec.Nonce {
		t.Errorf("got %v, want %v", got.Nonce, rec.Nonce)
	}
	if got.Status != storekit.StatusInProgress {
		t.Errorf("got %v, want %v", got.Status, storekit.StatusInProgress)
	}
	if got.Attempt != int64(1) {
		t.Errorf("got %v, want %v", got.Attempt, int64(1))
	}
}

func (su *suite) claimExistingLive(t *testing.T, s storekit.Store) {
	key, n1 := NewKey(), NewNonce()
	r := req(key, n1, "")
	r.TakeoverAfter = time.Minute // live however slow the machine is
	first := mustClaim(t, s, r, storekit.Claimed)
	// The stored record, not the claim's answer, is what must stay
	// untouched: a store that writes a claim without reading its clock
	// (Redis) answers with the caller's estimate of the times.
	stored, err := s.Get(ctxT(t), key)
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	rec := mustClaim(t, s, req(key, NewNonce(), ""), storekit.Existing)
	if rec.Nonce != n1 {
		t.Errorf("existing record must be returned untouched: got %v, want %v", rec.Nonce, n1)
	}
	if rec.Attempt != first.Attempt {
		t.Errorf("got %v, want %v", rec.Attempt, first.Attempt)
	}
	if rec.HeartbeatAt != stored.HeartbeatAt {
		t.Errorf("got %v, want %v", rec.HeartbeatAt, stored.HeartbeatAt)
	}
	if rec.Status != storekit.StatusInProgress {
		t.Errorf("got %v, want %v", rec.Status, storekit.StatusInProgress)
	}
}

func (su *suite) claimRetrySameNonce(t *testing.T, s storekit.Store) {
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, ""), storekit.Claimed)
	rec := mustClaim(t, s, req(key, n1, ""), storekit.Claimed)
	if rec.Nonce != n1 {
		t.Errorf("got %v, want %v", rec.Nonce, n1)
	}
	if rec.Attempt != int64(1) {
		t.Errorf("a retried claim must not count as a new attempt: got %v, want %v", rec.Attempt, int64(1))
	}
}

func (su *suite) takeoverStale(t *testing.T, s storekit.Store) {
	key, n1, n2 := NewKey(), NewNonce(), NewNonce()
	mustClaim(t, s, req(key, n1, "p"), storekit.Claimed)
	su.sleep(stale)
	r2 := req(key, n2, "p")
	r2.TakeoverAfter = time.Minute // the new claim stays live however slow the machine is
	rec := mustClaim(t, s, r2, storekit.TookOver)
	if rec.Nonce != n2 {
		t.Errorf("got %v, want %v", rec.Nonce, n2)
	}
	if rec.Attempt != int64(2) {
		t.Errorf("got %v, want %v", rec.Attempt, int64(2))
	}
	if rec.Status != storekit.StatusInProgress {
		t.Errorf("got %v, want %v", rec.Status, storekit.StatusInProgress)
	}
	su.near(t, rec.HeartbeatAt, "heartbeat_at after takeover")
	// The new claim is fresh: nobody takes it over at once.
	rec = mustClaim(t, s, req(key, NewNonce(), "p"), storekit.Existing)
	if rec.Nonce != n2 {
		t.Errorf("got %v, want %v", rec.Nonce, n2)
	}
}

func (su *suite) noTakeoverAfterHeartbeat(t *testing.T, s storekit.Store) {
	su.withSlack(t, func(scale time.Duration) bool {
		threshold, pause := 800*time.Millisecond*scale, 500*time.Millisecond*scale
		key, n1 := NewKey(), NewNonce()
		r := req(key, n1, "")
		r.TakeoverAfter = threshold
		mustClaim(t, s, r, storekit.Claimed)
		su.sleep(pause)
		beat := su.now()
		if err := s.Heartbeat(ctxT(t), key, n1, lease); err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		su.sleep(pause) // past the threshold since the claim, not since the heartbeat
		r2 := req(key, NewNonce(), "")
		r2.TakeoverAfter = threshold
		res := claimOutcome(t, s, r2)
		if res.Outcome != storekit.Existing && su.now().Sub(beat) >= threshold {
			return false // the heartbeat itself had gone stale by then
		}
		if res.Outcome != storekit.Existing {
			t.Fatalf("claim outcome: got %v, want %v", res.Outcome, storekit.Existing)
		}
		if res.Record.Nonce != n1 {
			t.Errorf("got %v, want %v", res.Record.Nonce, n1)
		}
		return true
	})
}

// ownersThresholdDecides: the takeover threshold is stored with the claim,
// and staleness is judged by it, not by the claiming caller's. A caller with
// a shorter threshold (a Guard configured with 300ms) must not take over a
// live claim whose owner heartbeats for 1s; past the owner's own threshold
// anyone may.
func (su *suite) ownersThresholdDecides(t *testing.T, s storekit.Store) {
	var key string
	var ownerThreshold, sinceClaim time.Duration
	su.withSlack(t, func(scale time.Duration) bool {
		key, ownerThreshold = NewKey(), time.Second*scale
		owner := NewNonce()
		long := req(key, owner, "p")
		long.TakeoverAfter = ownerThreshold
		claimed := su.now()
		rec := mustClaim(t, s, long, storekit.Claimed)
		if rec.TakeoverMs != ownerThreshold.Milliseconds() {
			t.Errorf("the owner's threshold is stored with the claim: got %v, want %v", rec.TakeoverMs, ownerThreshold.Milliseconds())
		}
		su.sleep(stale) // stale by the caller's 300ms, live by the owner's threshold
		res := claimOutcome(t, s, req(key, NewNonce(), "p"))
		sinceClaim = su.now().Sub(claimed)
		if res.Outcome != storekit.Existing && sinceClaim >= ownerThreshold {
			return false // the owner's own threshold had passed by then
		}
		if res.Outcome != storekit.Existing || res.Record.Nonce != owner {
			t.Fatalf("a shorter threshold took over a live claim: got %v of %v, want %v", res.Outcome, res.Record.Nonce, owner)
		}
		if res.Record.TakeoverMs != ownerThreshold.Milliseconds() {
			t.Errorf("got %v, want %v", res.Record.TakeoverMs, ownerThreshold.Milliseconds())
		}
		return true
	})
	su.sleep(ownerThreshold - sinceClaim + 150*time.Millisecond) // past the owner's threshold
	n2 := NewNonce()
	rec := mustClaim(t, s, req(key, n2, "p"), storekit.TookOver)
	if rec.Nonce != n2 {
		t.Errorf("got %v, want %v", rec.Nonce, n2)
	}
	if rec.Attempt != int64(2) {
		t.Errorf("got %v, want %v", rec.Attempt, int64(2))
	}
	if rec.TakeoverMs != takeover.Milliseconds() {
		t.Errorf("the new owner's threshold replaces the old one: got %v, want %v", rec.TakeoverMs, takeover.Milliseconds())
	}
}

func (su *suite) noTakeoverOnPayloadMismatch(t *testing.T, s storekit.Store) {
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, "a"), storekit.Claimed)
	su.sleep(stale)
	rec := mustClaim(t, s, req(key, NewNonce(), "b"), storekit.Existing)
	if rec.Nonce != n1 {
		t.Errorf("a stale claim must not be taken over by a different payload: got %v, want %v", rec.Nonce, n1)
	}
	if rec.PayloadHash != "a" {
		t.Errorf("got %v, want %v", rec.PayloadHash, "a")
	}
}

func (su *suite) noTakeoverOfCompleted(t *testing.T, s storekit.Store) {
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, ""), storekit.Claimed)
	if err := s.Complete(ctxT(t), key, n1, storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`1`), TTL: time.Minute}); err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	su.sleep(stale)
	rec := mustClaim(t, s, req(key, NewNonce(), ""), storekit.Existing)
	if rec.Status != storekit.StatusCompleted {
		t.Errorf("got %v, want %v", rec.Status, storekit.StatusCompleted)
	}
	if !bytes.Equal(rec.Result, []byte(`1`)) {
		t.Errorf("got %q, want %q", rec.Result, []byte(`1`))
	}
}

func (su *suite) nonceFencing(t *testing.T, s storekit.Store) {
	key, n1, n2 := NewKey(), NewNonce(), NewNonce()
	mustClaim(t, s, req(key, n1, ""), storekit.Claimed)
	su.sleep(stale)
	mustClaim(t, s, req(key, n2, ""), storekit.TookOver)
	ctx := ctxT(t)
	if err := s.Heartbeat(ctx, key, n1, lease); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Errorf("got %v, want %v", err, storekit.ErrLostOwnership)
	}
	if err := s.Complete(ctx, key, n1, storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`"stale"`), TTL: time.Minute}); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Errorf("got %v, want %v", err, storekit.ErrLostOwnership)
	}
	if err := s.Release(ctx, key, n1); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Errorf("got %v, want %v", err, storekit.ErrLostOwnership)
	}
	rec, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if rec.Nonce != n2 {
		t.Errorf("refused writes must change nothing: got %v, want %v", rec.Nonce, n2)
	}
	if rec.Status != storekit.StatusInProgress {
		t.Errorf("got %v, want %v", rec.Status, storekit.StatusInProgress)
	}
	if err := s.Complete(ctx, key, n2, storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`"new"`), TTL: time.Minute}); err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if err := s.Complete(ctx, key, n1, storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`"stale"`), TTL: time.Minute}); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Errorf("got %v, want %v", err, storekit.ErrLostOwnership)
	}
	rec, err = s.Get(ctx, key)
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if !bytes.Equal(rec.Result, []byte(`"new"`)) {
		t.Errorf("got %q, want %q", rec.Result, []byte(`"new"`))
	}
}

func (su *suite) heartbeat(t *testing.T, s storekit.Store) {
	ctx := ctxT(t)
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, ""), storekit.Claimed)
	first, err := s.Get(ctx, key) // the stored times (see claimExistingLive)
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	su.sleep(50 * time.Millisecond)
	if err := s.Heartbeat(ctx, key, n1, time.Hour); err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	rec, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if rec.HeartbeatAt <= first.HeartbeatAt {
		t.Errorf("got %v, want > %v", rec.HeartbeatAt, first.HeartbeatAt)
	}
	if rec.StartedAt != first.StartedAt {
		t.Errorf("got %v, want %v", rec.StartedAt, first.StartedAt)
	}
	if rec.ExpiresAt < rec.HeartbeatAt+time.Hour.Milliseconds()-5 {
		t.Errorf("heartbeat extends the lease: got %v, want >= %v", rec.ExpiresAt, rec.HeartbeatAt+time.Hour.Milliseconds()-5)
	}
	if rec.Attempt != int64(1) {
		t.Errorf("got %v, want %v", rec.Attempt, int64(1))
	}
	if err := s.Heartbeat(ctx, key, NewNonce(), lease); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Errorf("got %v, want %v", err, storekit.ErrLostOwnership)
	}
	if err := s.Heartbeat(ctx, NewKey(), n1, lease); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Errorf("heartbeat on a missing key: got %v, want %v", err, storekit.ErrLostOwnership)
	}
	if err := s.Complete(ctx, key, n1, storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`1`), TTL: time.Minute}); err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if err := s.Heartbeat(ctx, key, n1, lease); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Errorf("heartbeat on a completed record: got %v, want %v", err, storekit.ErrLostOwnership)
	}
}

func (su *suite) complete(t *testing.T, s storekit.Store) {
	ctx := ctxT(t)
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, "ph"), storekit.Claimed)
	if err := s.Complete(ctx, key, n1, storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`{"id":7}`), TTL: time.Hour}); err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	rec, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if rec.Status != storekit.StatusCompleted {
		t.Errorf("got %v, want %v", rec.Status, storekit.StatusCompleted)
	}
	if !bytes.Equal(rec.Result, []byte(`{"id":7}`)) {
		t.Errorf("got %q, want %q", rec.Result, []byte(`{"id":7}`))
	}
	if rec.Error != nil {
		t.Errorf("got %v, want nil", rec.Error)
	}
	if rec.PayloadHash != "ph" {
		t.Errorf("got %v, want %v", rec.PayloadHash, "ph")
	}
	if rec.Nonce != n1 {
		t.Errorf("got %v, want %v", rec.Nonce, n1)
	}
	su.near(t, rec.CompletedAt, "completed_at")
	if d := rec.ExpiresAt - (rec.CompletedAt + time.Hour.Milliseconds()); d > 5 || d < -5 {
		t.Errorf("got %v, want %v ± %v", rec.ExpiresAt, rec.CompletedAt+time.Hour.Milliseconds(), 5)
	}
	// A claim now replays the record in one step.
	got := mustClaim(t, s, req(key, NewNonce(), "ph"), storekit.Existing)
	if !bytes.Equal(got.Result, []byte(`{"id":7}`)) {
		t.Errorf("got %q, want %q", got.Result, []byte(`{"id":7}`))
	}
	if got.Status != storekit.StatusCompleted {
		t.Errorf("got %v, want %v", got.Status, storekit.StatusCompleted)
	}
	// Completed without a result (it could not be encoded).
	k2, n2 := NewKey(), NewNonce()
	mustClaim(t, s, req(k2, n2, ""), storekit.Claimed)
	if err := s.Complete(ctx, k2, n2, storekit.Completion{Status: storekit.StatusCompleted,
		Error: &storekit.RecordedFailure{Message: "cannot encode", Type: storekit.ResultUnavailableType}, TTL: time.Hour}); err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	got = mustClaim(t, s, req(k2, NewNonce(), ""), storekit.Existing)
	if got.Status != storekit.StatusCompleted {
		t.Errorf("got %v, want %v", got.Status, storekit.StatusCompleted)
	}
	if len(got.Result) != 0 {
		t.Errorf("got %q, want empty", got.Result)
	}
	if got.Error == nil {
		t.Fatalf("got.Error is nil")
	}
	if got.Error.Type != storekit.ResultUnavailableType {
		t.Errorf("got %v, want %v", got.Error.Type, storekit.ResultUnavailableType)
	}
	if err := s.Complete(ctx, NewKey(), n1, storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Hour}); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Errorf("complete on a missing key: got %v, want %v", err, storekit.ErrLostOwnership)
	}
}

func (su *suite) completeFailed(t *testing.T, s storekit.Store) {
	ctx := ctxT(t)
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, ""), storekit.Claimed)
	if err := s.Complete(ctx, key, n1, storekit.Completion{Status: storekit.StatusFailed,
		Error: &storekit.RecordedFailure{Message: "card declined", Type: "*billing.DeclineError"}, TTL: time.Hour}); err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	rec := mustClaim(t, s, req(key, NewNonce(), ""), storekit.Existing)
	if rec.Status != storekit.StatusFailed {
		t.Errorf("got %v, want %v", rec.Status, storekit.StatusFailed)
	}
	if rec.Error == nil {
		t.Fatalf("rec.Error is nil")
	}
	if rec.Error.Message != "card declined" {
		t.Errorf("got %v, want %v", rec.Error.Message, "card declined")
	}
	if rec.Error.Type != "*billing.DeclineError" {
		t.Errorf("got %v, want %v", rec.Error.Type, "*billing.DeclineError")
	}
}

func (su *suite) completeRetry(t *testing.T, s storekit.Store) {
	ctx := ctxT(t)
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, ""), storekit.Claimed)
	c := storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`"ok"`), TTL: time.Hour}
	if err := s.Complete(ctx, key, n1, c); err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if err := s.Complete(ctx, key, n1, c); err != nil {
		t.Fatalf("a retried complete that finds its own write succeeds: unexpected error: %v", err)
	}
	rec, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if !bytes.Equal(rec.Result, []byte(`"ok"`)) {
		t.Errorf("got %q, want %q", rec.Result, []byte(`"ok"`))
	}
}

// claimRecordIsTheCallers: the record a claim returns is handed over
// (storekit.ClaimResult): a caller that changes it, as a Guard does when its
// claim completes, changes nothing the store holds or decides with.
func (su *suite) claimRecordIsTheCallers(t *testing.T, s storekit.Store) {
	ctx := ctxT(t)
	key, n1 := NewKey(), NewNonce()
	scribble := func(r *storekit.Record) {
		r.Nonce, r.Status, r.Attempt, r.Result = "scribbled", storekit.StatusCompleted, 99, []byte(`"scribbled"`)
		r.ExpiresAt, r.HeartbeatAt = 1, 1
	}
	scribble(mustClaim(t, s, req(key, n1, ""), storekit.Claimed))
	if err := s.Heartbeat(ctx, key, n1, time.Hour); err != nil {
		t.Fatalf("heartbeat after the caller changed its copy: %v", err)
	}
	scribble(mustClaim(t, s, req(key, NewNonce(), ""), storekit.Existing))
	if err := s.Complete(ctx, key, n1, storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`"ok"`), TTL: time.Hour}); err != nil {
		t.Fatalf("complete after the caller changed its copy: %v", err)
	}
	rec, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if rec.Nonce != n1 || rec.Attempt != 1 || !bytes.Equal(rec.Result, []byte(`"ok"`)) {
		t.Errorf("got nonce %q, attempt %d, result %q; want %q, 1, \"ok\"", rec.Nonce, rec.Attempt, rec.Result, n1)
	}
	scribble(rec)
	rec, err = s.Get(ctx, key)
	if err != nil || rec.Nonce != n1 {
		t.Errorf("a record Get returned, changed, changed the store: %+v, %v", rec, err)
	}
}

func (su *suite) binaryResult(t *testing.T, s storekit.Store) {
	ctx := ctxT(t)
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, ""), storekit.Claimed)
	all := make([]byte, 0, 512)
	for i := 0; i < 512; i++ {
		all = append(all, byte(i))
	}
	if err := s.Complete(ctx, key, n1, storekit.Completion{Status: storekit.StatusCompleted, Result: all, TTL: time.Hour}); err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	rec, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if !bytes.Equal(all, rec.Result) {
		t.Errorf("result bytes must round-trip exactly")
	}
}

func (su *suite) release(t *testing.T, s storekit.Store) {
	ctx := ctxT(t)
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, ""), storekit.Claimed)
	if err := s.Release(ctx, key, NewNonce()); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Errorf("got %v, want %v", err, storekit.ErrLostOwnership)
	}
	if err := s.Release(ctx, key, n1); err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	_, err := s.Get(ctx, key)
	if !errors.Is(err, storekit.ErrNotFound) {
		t.Errorf("a released record is not live: got %v, want %v", err, storekit.ErrNotFound)
	}
	if err := s.Heartbeat(ctx, key, n1, lease); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Errorf("a late heartbeat does not revive a released claim: got %v, want %v", err, storekit.ErrLostOwnership)
	}
	_, err = s.Get(ctx, key)
	if !errors.Is(err, storekit.ErrNotFound) {
		t.Errorf("the refused heartbeat changed nothing: got %v, want %v", err, storekit.ErrNotFound)
	}
	n2 := NewNonce()
	rec := mustClaim(t, s, req(key, n2, ""), storekit.Claimed)
	if rec.Attempt != int64(2) {
		t.Errorf("attempts stay monotonic across a release: got %v, want %v", rec.Attempt, int64(2))
	}
	if len(rec.Result) != 0 {
		t.Errorf("got %q, want empty", rec.Result)
	}
	if rec.Error != nil {
		t.Errorf("got %v, want nil", rec.Error)
	}
	if err := s.Release(ctx, key, n1); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Errorf("the old owner cannot release the new claim: got %v, want %v", err, storekit.ErrLostOwnership)
	}
	if err := s.Complete(ctx, key, n2, storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`1`), TTL: time.Hour}); err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if err := s.Release(ctx, key, n2); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Errorf("a completed record cannot be released: got %v, want %v", err, storekit.ErrLostOwnership)
	}
}

func (su *suite) expiry(t *testing.T, s storekit.Store) {
	ctx := ctxT(t)
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, "a"), storekit.Claimed)
	if err := s.Complete(ctx, key, n1, storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`1`), TTL: 300 * time.Millisecond}); err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	_, err := s.Get(ctx, key)
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	su.sleep(450 * time.Millisecond)
	_, err = s.Get(ctx, key)
	if !errors.Is(err, storekit.ErrNotFound) {
		t.Errorf("expiry is decided by the record's expires_at: got %v, want %v", err, storekit.ErrNotFound)
	}
	// An expired record is claimable even with another payload, and the
	// attempt count goes on (or, when the record expired natively and is
	// gone, starts again).
	rec := mustClaim(t, s, req(key, NewNonce(), "b"), storekit.Claimed)
	if want := int64(2); su.native && rec.Attempt != 1 {
		t.Errorf("got attempt %v, want 1: the natively expired record is gone", rec.Attempt)
	} else if !su.native && rec.Attempt != want {
		t.Errorf("got %v, want %v", rec.Attempt, want)
	}
	if rec.PayloadHash != "b" {
		t.Errorf("got %v, want %v", rec.PayloadHash, "b")
	}
	if rec.Status != storekit.StatusInProgress {
		t.Errorf("got %v, want %v", rec.Status, storekit.StatusInProgress)
	}
	if len(rec.Result) != 0 {
		t.Errorf("got %q, want empty", rec.Result)
	}
	if rec.CompletedAt != 0 {
		t.Errorf("got %v, want 0", rec.CompletedAt)
	}
	// An in-progress record whose lease ran out is claimable too.
	k2 := NewKey()
	r := req(k2, NewNonce(), "")
	r.LeaseTTL, r.TakeoverAfter = 300*time.Millisecond, time.Hour
	n3 := r.Nonce
	mustClaim(t, s, r, storekit.Claimed)
	su.sleep(450 * time.Millisecond)
	if err := s.Heartbeat(ctx, k2, n3, lease); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Errorf("an expired claim is not revived by a heartbeat: got %v, want %v", err, storekit.ErrLostOwnership)
	}
	r2 := req(k2, NewNonce(), "")
	r2.TakeoverAfter = time.Hour
	rec = mustClaim(t, s, r2, storekit.Claimed)
	if rec.Attempt != int64(2) {
		t.Errorf("got %v, want %v", rec.Attempt, int64(2))
	}
}

func (su *suite) getMissing(t *testing.T, s storekit.Store) {
	_, err := s.Get(ctxT(t), NewKey())
	if !errors.Is(err, storekit.ErrNotFound) {
		t.Errorf("got %v, want %v", err, storekit.ErrNotFound)
	}
}

func (su *suite) delete(t *testing.T, s storekit.Store) {
	ctx := ctxT(t)
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, ""), storekit.Claimed)
	if err := s.Delete(ctx, key); err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	_, err := s.Get(ctx, key)
	if !errors.Is(err, storekit.ErrNotFound) {
		t.Errorf("got %v, want %v", err, storekit.ErrNotFound)
	}
	if err := s.Delete(ctx, key); err != nil {
		t.Fatalf("deleting a missing record is not an error: unexpected error: %v", err)
	}
	if err := s.Complete(ctx, key, n1, storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Hour}); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Errorf("got %v, want %v", err, storekit.ErrLostOwnership)
	}
	mustClaim(t, s, req(key, NewNonce(), ""), storekit.Claimed)
}

func (su *suite) concurrentClaim(t *testing.T, s storekit.Store) {
	const n = 64
	key := NewKey()
	var claimed atomic.Int32
	nonces := make([]string, n)
	results := make([]storekit.ClaimResult, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		nonces[i] = NewNonce()
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			r := req(key, nonces[i], "")
			r.TakeoverAfter = time.Minute
			res, err := s.Claim(context.Background(), r)
			if err != nil {
				t.Errorf("Claim: %v", err)
				return
			}
			results[i] = res
			if res.Outcome == storekit.Claimed {
				claimed.Add(1)
			}
		}(i)
	}
	close(start)
	wg.Wait()
	if got := claimed.Load(); got != int32(1) {
		t.Fatalf("exactly one of %d concurrent claims wins: got %v, want %v", n, got, int32(1))
	}
	var winner string
	for i, r := range results {
		if r.Outcome == storekit.Claimed {
			winner = nonces[i]
		}
	}
	for _, r := range results {
		if r.Record.Nonce != winner {
			t.Errorf("every loser sees the winner's record: got %v, want %v", r.Record.Nonce, winner)
		}
	}
}

func (su *suite) concurrentTakeover(t *testing.T, s storekit.Store) {
	const n = 32
	key := NewKey()
	mustClaim(t, s, req(key, NewNonce(), ""), storekit.Claimed)
	su.sleep(stale)
	var took, other atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// The winner's claim stores this threshold: it stays live
			// however long the others take to reach the store, so a
			// second takeover is a fault, not a slow machine.
			r := req(key, NewNonce(), "")
			r.TakeoverAfter = time.Minute
			res, err := s.Claim(context.Background(), r)
			if err != nil {
				t.Errorf("Claim: %v", err)
				return
			}
			switch res.Outcome {
			case storekit.TookOver:
				took.Add(1)
			case storekit.Existing:
				other.Add(1)
			default:
				t.Errorf("claim outcome: got %v, want %v or %v", res.Outcome, storekit.TookOver, storekit.Existing)
			}
			if res.Record.Attempt != 2 {
				t.Errorf("every claim sees the one takeover: got attempt %v, want 2", res.Record.Attempt)
			}
		}()
	}
	close(start)
	wg.Wait()
	if got := took.Load(); got != int32(1) {
		t.Errorf("exactly one of %d concurrent takeovers wins: got %v, want %v", n, got, int32(1))
	}
}

func (su *suite) concurrentManyKeys(t *testing.T, s storekit.Store) {
	const workers, keys = 16, 40
	ks := make([]string, keys)
	for i := range ks {
		ks[i] = NewKey()
	}
	wins := make([]atomic.Int32, keys)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i, k := range ks {
				nonce := NewNonce()
				r := req(k, nonce, "")
				r.TakeoverAfter = time.Minute // no takeover however slow the store is under load
				res, err := s.Claim(context.Background(), r)
				if err != nil {
					t.Errorf("Claim: %v", err)
					return
				}
				if res.Outcome == storekit.Claimed {
					wins[i].Add(1)
					if err := s.Complete(context.Background(), k, nonce,
						storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`1`), TTL: time.Minute}); err != nil {
						t.Errorf("unexpected error: %v", err)
					}
				}
			}
		}()
	}
	wg.Wait()
	for i := range wins {
		if got := wins[i].Load(); got != int32(1) {
			t.Errorf("key %d claimed once: got %v, want %v", i, got, int32(1))
		}
	}
}

func (su *suite) watch(t *testing.T, s storekit.Store) {
	w, ok := s.(storekit.Watcher)
	if !ok && su.mustWatch {
		t.Fatalf("Harness.Watch is set, and %T does not implement storekit.Watcher", s)
	}
	if !ok {
		t.Skip("store does not implement storekit.Watcher")
	}
	ctx := ctxT(t)
	for _, op := range []string{"complete", "release"} {
		key, n1 := NewKey(), NewNonce()
		mustClaim(t, s, req(key, n1, ""), storekit.Claimed)
		ch, stop, err := w.Watch(ctx, key)
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		select {
		case <-ch:
			t.Fatalf("%s: watch fired before any change", op)
		case <-time.After(20 * time.Millisecond):
		}
		if op == "complete" {
			if err := s.Complete(ctx, key, n1, storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`1`), TTL: time.Minute}); err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
		} else {
			if err := s.Release(ctx, key, n1); err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
		}
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s did not wake the watcher", op)
		}
		stop()
	}
}

func (su *suite) corruptRecord(t *testing.T, s storekit.Store) {
	if su.corrupt == nil {
		t.Skip("no corrupter given (Harness.Corrupt)")
	}
	ctx := ctxT(t)
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, ""), storekit.Claimed)
	su.corrupt(t, s, key)
	_, err := s.Get(ctx, key)
	if !errors.Is(err, storekit.ErrCorruptRecord) {
		t.Errorf("got %v, want %v", err, storekit.ErrCorruptRecord)
	}
	var ce *storekit.CorruptRecordError
	if !errors.As(err, &ce) {
		t.Errorf("Get returns a *storekit.CorruptRecordError, got %T", err)
	}
	_, err = s.Claim(ctx, req(key, NewNonce(), ""))
	if !errors.Is(err, storekit.ErrCorruptRecord) {
		t.Errorf("a claim must not overwrite a corrupt record: got %v, want %v", err, storekit.ErrCorruptRecord)
	}
	if err := s.Delete(ctx, key); err != nil {
		t.Fatalf("a corrupt record can be deleted: unexpected error: %v", err)
	}
	mustClaim(t, s, req(key, NewNonce(), ""), storekit.Claimed)
}

func (su *suite) contextCancelled(t *testing.T, s storekit.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Claim(ctx, req(NewKey(), NewNonce(), ""))
	if err == nil {
		t.Errorf("a claim with a cancelled context fails: got no error")
	}
}
