// Package storetest is the conformance suite for idem.Store
// implementations. Every store in this module runs it against its real
// backend, and a third-party store can run it too:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, func(t *testing.T) idem.Store { return mystore.New(...) })
//	}
//
// RunProcesses goes further: it re-runs the test binary as several OS
// processes whose Guards share the store, and checks that every key ran
// exactly once. Instrument wraps a store to count its operations and to
// inject faults; hand a Guard its AsStore, which is an idem.Watcher exactly
// when the wrapped store is one.
//
// newStore is called once per subtest; stores it returns may share a
// backend, since every subtest uses fresh random keys. Run sleeps for
// short, fixed periods (a few hundred milliseconds) to let claims go stale
// and records expire, and takes a few seconds per store. A store that takes
// a clock runs RunWithClock instead: the suite then hands each subtest's
// store a Clock and advances it, and sleeps not at all:
//
//	storetest.RunWithClock(t, func(t *testing.T, c *storetest.Clock) idem.Store {
//		return mystore.New(mystore.WithClock(c.Now))
//	}, storetest.WithCorrupter(corrupt))
//
// WithCorrupter hands the suite a way to damage a stored record, so that it
// checks the record is reported as idem.ErrCorruptRecord and never
// overwritten. The suite depends on the standard library only.
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

	"github.com/idem-go/idem"
)

// Option configures Run.
type Option func(*suite)

type suite struct {
	corrupt func(t *testing.T, s idem.Store, key string)
	skew    time.Duration
	clock   *Clock // nil: the store runs on real time and the suite sleeps
	native  bool   // completed and failed records expire natively at expires_at
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

// WithCorrupter lets the suite check that a damaged record is reported as
// idem.ErrCorruptRecord: corrupt must overwrite the stored record for key
// (which exists) with undecodable data, bypassing the Store interface.
func WithCorrupter(corrupt func(t *testing.T, s idem.Store, key string)) Option {
	return func(su *suite) { su.corrupt = corrupt }
}

// WithClockSkew sets how far the store's clock may be from the test's when
// the suite checks record timestamps (default 2s).
func WithClockSkew(d time.Duration) Option {
	return func(su *suite) { su.skew = d }
}

// WithNativeExpiry declares that the store deletes a completed or failed
// record at its expires_at exactly (DESIGN rules 9 and 10, Redis): the
// record and its attempt count are gone then, so a claim after that expiry
// starts again at attempt 1 instead of continuing the count.
func WithNativeExpiry() Option {
	return func(su *suite) { su.native = true }
}

// NewKey returns a fresh random storage key.
func NewKey() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return idem.StorageKeyPrefix + hex.EncodeToString(b[:])
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

func req(key, nonce, payload string) idem.ClaimRequest {
	return idem.ClaimRequest{Key: key, Nonce: nonce, PayloadHash: payload, LeaseTTL: lease, TakeoverAfter: takeover}
}

// Run runs the conformance suite against stores made by newStore, on real
// time: it sleeps to let claims go stale and records expire.
func Run(t *testing.T, newStore func(t *testing.T) idem.Store, opts ...Option) {
	run(t, func(t *testing.T, _ *Clock) idem.Store { return newStore(t) }, false, opts)
}

// RunWithClock runs the conformance suite against stores that read the
// time from the Clock handed to newStore (a store's WithClock option takes
// clock.Now). The suite advances the clock instead of sleeping, so it runs
// in milliseconds and checks timestamps exactly. Each subtest gets a clock
// of its own.
func RunWithClock(t *testing.T, newStore func(t *testing.T, clock *Clock) idem.Store, opts ...Option) {
	run(t, newStore, true, opts)
}

func run(t *testing.T, newStore func(t *testing.T, clock *Clock) idem.Store, withClock bool, opts []Option) {
	su := &suite{skew: 2 * time.Second}
	for _, o := range opts {
		o(su)
	}
	tests := []struct {
		name string
		fn   func(su *suite, t *testing.T, s idem.Store)
	}{
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
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			sub := *su
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
	assertLess(t, d.Abs(), su.skew+time.Millisecond, "%s is %v away from now", what, d)
}

func mustClaim(t *testing.T, s idem.Store, r idem.ClaimRequest, want idem.ClaimOutcome) *idem.Record {
	t.Helper()
	res, err := s.Claim(ctxT(t), r)
	requireNoError(t, err)
	requireNotNil(t, res.Record)
	requireEqual(t, want, res.Outcome, "claim outcome")
	return res.Record
}

func (su *suite) claimNew(t *testing.T, s idem.Store) {
	key, nonce := NewKey(), NewNonce()
	rec := mustClaim(t, s, req(key, nonce, "ph1"), idem.Claimed)
	assertEqual(t, key, rec.Key)
	assertEqual(t, idem.StatusInProgress, rec.Status)
	assertEqual(t, nonce, rec.Nonce)
	assertEqual(t, int64(1), rec.Attempt)
	assertEqual(t, "ph1", rec.PayloadHash)
	su.near(t, rec.StartedAt, "started_at")
	assertEqual(t, rec.StartedAt, rec.HeartbeatAt)
	assertInDelta(t, rec.StartedAt+lease.Milliseconds(), rec.ExpiresAt, 5)
	got, err := s.Get(ctxT(t), key)
	requireNoError(t, err)
	assertEqual(t, rec.Nonce, got.Nonce)
	assertEqual(t, idem.StatusInProgress, got.Status)
	assertEqual(t, int64(1), got.Attempt)
}

func (su *suite) claimExistingLive(t *testing.T, s idem.Store) {
	key, n1 := NewKey(), NewNonce()
	first := mustClaim(t, s, req(key, n1, ""), idem.Claimed)
	// The stored record, not the claim's answer, is what must stay
	// untouched: a store that writes a claim without reading its clock
	// (Redis) answers with the caller's estimate of the times.
	stored, err := s.Get(ctxT(t), key)
	requireNoError(t, err)
	rec := mustClaim(t, s, req(key, NewNonce(), ""), idem.Existing)
	assertEqual(t, n1, rec.Nonce, "existing record must be returned untouched")
	assertEqual(t, first.Attempt, rec.Attempt)
	assertEqual(t, stored.HeartbeatAt, rec.HeartbeatAt)
	assertEqual(t, idem.StatusInProgress, rec.Status)
}

func (su *suite) claimRetrySameNonce(t *testing.T, s idem.Store) {
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, ""), idem.Claimed)
	rec := mustClaim(t, s, req(key, n1, ""), idem.Claimed)
	assertEqual(t, n1, rec.Nonce)
	assertEqual(t, int64(1), rec.Attempt, "a retried claim must not count as a new attempt")
}

func (su *suite) takeoverStale(t *testing.T, s idem.Store) {
	key, n1, n2 := NewKey(), NewNonce(), NewNonce()
	mustClaim(t, s, req(key, n1, "p"), idem.Claimed)
	su.sleep(stale)
	rec := mustClaim(t, s, req(key, n2, "p"), idem.TookOver)
	assertEqual(t, n2, rec.Nonce)
	assertEqual(t, int64(2), rec.Attempt)
	assertEqual(t, idem.StatusInProgress, rec.Status)
	su.near(t, rec.HeartbeatAt, "heartbeat_at after takeover")
	// The new claim is fresh: nobody takes it over at once.
	rec = mustClaim(t, s, req(key, NewNonce(), "p"), idem.Existing)
	assertEqual(t, n2, rec.Nonce)
}

func (su *suite) noTakeoverAfterHeartbeat(t *testing.T, s idem.Store) {
	key, n1 := NewKey(), NewNonce()
	r := req(key, n1, "")
	r.TakeoverAfter = 800 * time.Millisecond
	mustClaim(t, s, r, idem.Claimed)
	su.sleep(500 * time.Millisecond)
	requireNoError(t, s.Heartbeat(ctxT(t), key, n1, lease))
	su.sleep(500 * time.Millisecond) // 1s since the claim, 0.5s since the heartbeat
	r2 := req(key, NewNonce(), "")
	r2.TakeoverAfter = 800 * time.Millisecond
	rec := mustClaim(t, s, r2, idem.Existing)
	assertEqual(t, n1, rec.Nonce)
}

// ownersThresholdDecides: the takeover threshold is stored with the claim,
// and staleness is judged by it, not by the claiming caller's. A caller with
// a shorter threshold (a Guard configured with 300ms) must not take over a
// live claim whose owner heartbeats for 1s; past the owner's own threshold
// anyone may.
func (su *suite) ownersThresholdDecides(t *testing.T, s idem.Store) {
	key, owner := NewKey(), NewNonce()
	long := req(key, owner, "p")
	long.TakeoverAfter = time.Second
	rec := mustClaim(t, s, long, idem.Claimed)
	assertEqual(t, int64(1000), rec.TakeoverMs, "the owner's threshold is stored with the claim")
	su.sleep(stale) // stale by the caller's 300ms, live by the owner's 1s
	rec = mustClaim(t, s, req(key, NewNonce(), "p"), idem.Existing)
	assertEqual(t, owner, rec.Nonce, "a shorter threshold took over a live claim")
	assertEqual(t, int64(1000), rec.TakeoverMs)
	su.sleep(time.Second - stale + 150*time.Millisecond) // past the owner's threshold
	n2 := NewNonce()
	rec = mustClaim(t, s, req(key, n2, "p"), idem.TookOver)
	assertEqual(t, n2, rec.Nonce)
	assertEqual(t, int64(2), rec.Attempt)
	assertEqual(t, takeover.Milliseconds(), rec.TakeoverMs, "the new owner's threshold replaces the old one")
}

func (su *suite) noTakeoverOnPayloadMismatch(t *testing.T, s idem.Store) {
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, "a"), idem.Claimed)
	su.sleep(stale)
	rec := mustClaim(t, s, req(key, NewNonce(), "b"), idem.Existing)
	assertEqual(t, n1, rec.Nonce, "a stale claim must not be taken over by a different payload")
	assertEqual(t, "a", rec.PayloadHash)
}

func (su *suite) noTakeoverOfCompleted(t *testing.T, s idem.Store) {
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, ""), idem.Claimed)
	requireNoError(t, s.Complete(ctxT(t), key, n1, idem.Completion{Status: idem.StatusCompleted, Result: []byte(`1`), TTL: time.Minute}))
	su.sleep(stale)
	rec := mustClaim(t, s, req(key, NewNonce(), ""), idem.Existing)
	assertEqual(t, idem.StatusCompleted, rec.Status)
	assertEqual(t, []byte(`1`), rec.Result)
}

func (su *suite) nonceFencing(t *testing.T, s idem.Store) {
	key, n1, n2 := NewKey(), NewNonce(), NewNonce()
	mustClaim(t, s, req(key, n1, ""), idem.Claimed)
	su.sleep(stale)
	mustClaim(t, s, req(key, n2, ""), idem.TookOver)
	ctx := ctxT(t)
	assertErrorIs(t, s.Heartbeat(ctx, key, n1, lease), idem.ErrLostOwnership)
	assertErrorIs(t, s.Complete(ctx, key, n1, idem.Completion{Status: idem.StatusCompleted, Result: []byte(`"stale"`), TTL: time.Minute}), idem.ErrLostOwnership)
	assertErrorIs(t, s.Release(ctx, key, n1), idem.ErrLostOwnership)
	rec, err := s.Get(ctx, key)
	requireNoError(t, err)
	assertEqual(t, n2, rec.Nonce, "refused writes must change nothing")
	assertEqual(t, idem.StatusInProgress, rec.Status)
	requireNoError(t, s.Complete(ctx, key, n2, idem.Completion{Status: idem.StatusCompleted, Result: []byte(`"new"`), TTL: time.Minute}))
	assertErrorIs(t, s.Complete(ctx, key, n1, idem.Completion{Status: idem.StatusCompleted, Result: []byte(`"stale"`), TTL: time.Minute}), idem.ErrLostOwnership)
	rec, err = s.Get(ctx, key)
	requireNoError(t, err)
	assertEqual(t, []byte(`"new"`), rec.Result)
}

func (su *suite) heartbeat(t *testing.T, s idem.Store) {
	ctx := ctxT(t)
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, ""), idem.Claimed)
	first, err := s.Get(ctx, key) // the stored times (see claimExistingLive)
	requireNoError(t, err)
	su.sleep(50 * time.Millisecond)
	requireNoError(t, s.Heartbeat(ctx, key, n1, time.Hour))
	rec, err := s.Get(ctx, key)
	requireNoError(t, err)
	assertGreater(t, rec.HeartbeatAt, first.HeartbeatAt)
	assertEqual(t, first.StartedAt, rec.StartedAt)
	assertGreaterOrEqual(t, rec.ExpiresAt, rec.HeartbeatAt+time.Hour.Milliseconds()-5, "heartbeat extends the lease")
	assertEqual(t, int64(1), rec.Attempt)
	assertErrorIs(t, s.Heartbeat(ctx, key, NewNonce(), lease), idem.ErrLostOwnership)
	assertErrorIs(t, s.Heartbeat(ctx, NewKey(), n1, lease), idem.ErrLostOwnership, "heartbeat on a missing key")
	requireNoError(t, s.Complete(ctx, key, n1, idem.Completion{Status: idem.StatusCompleted, Result: []byte(`1`), TTL: time.Minute}))
	assertErrorIs(t, s.Heartbeat(ctx, key, n1, lease), idem.ErrLostOwnership, "heartbeat on a completed record")
}

func (su *suite) complete(t *testing.T, s idem.Store) {
	ctx := ctxT(t)
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, "ph"), idem.Claimed)
	requireNoError(t, s.Complete(ctx, key, n1, idem.Completion{Status: idem.StatusCompleted, Result: []byte(`{"id":7}`), TTL: time.Hour}))
	rec, err := s.Get(ctx, key)
	requireNoError(t, err)
	assertEqual(t, idem.StatusCompleted, rec.Status)
	assertEqual(t, []byte(`{"id":7}`), rec.Result)
	assertNil(t, rec.Error)
	assertEqual(t, "ph", rec.PayloadHash)
	assertEqual(t, n1, rec.Nonce)
	su.near(t, rec.CompletedAt, "completed_at")
	assertInDelta(t, rec.CompletedAt+time.Hour.Milliseconds(), rec.ExpiresAt, 5)
	// A claim now replays the record in one step.
	got := mustClaim(t, s, req(key, NewNonce(), "ph"), idem.Existing)
	assertEqual(t, []byte(`{"id":7}`), got.Result)
	assertEqual(t, idem.StatusCompleted, got.Status)
	// Completed without a result (it could not be encoded).
	k2, n2 := NewKey(), NewNonce()
	mustClaim(t, s, req(k2, n2, ""), idem.Claimed)
	requireNoError(t, s.Complete(ctx, k2, n2, idem.Completion{Status: idem.StatusCompleted,
		Error: &idem.StoredError{Message: "cannot encode", Type: idem.ResultUnavailableType}, TTL: time.Hour}))
	got = mustClaim(t, s, req(k2, NewNonce(), ""), idem.Existing)
	assertEqual(t, idem.StatusCompleted, got.Status)
	assertEmpty(t, got.Result)
	requireNotNil(t, got.Error)
	assertEqual(t, idem.ResultUnavailableType, got.Error.Type)
	assertErrorIs(t, s.Complete(ctx, NewKey(), n1, idem.Completion{Status: idem.StatusCompleted, TTL: time.Hour}), idem.ErrLostOwnership, "complete on a missing key")
}

func (su *suite) completeFailed(t *testing.T, s idem.Store) {
	ctx := ctxT(t)
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, ""), idem.Claimed)
	requireNoError(t, s.Complete(ctx, key, n1, idem.Completion{Status: idem.StatusFailed,
		Error: &idem.StoredError{Message: "card declined", Type: "*billing.DeclineError"}, TTL: time.Hour}))
	rec := mustClaim(t, s, req(key, NewNonce(), ""), idem.Existing)
	assertEqual(t, idem.StatusFailed, rec.Status)
	requireNotNil(t, rec.Error)
	assertEqual(t, "card declined", rec.Error.Message)
	assertEqual(t, "*billing.DeclineError", rec.Error.Type)
}

func (su *suite) completeRetry(t *testing.T, s idem.Store) {
	ctx := ctxT(t)
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, ""), idem.Claimed)
	c := idem.Completion{Status: idem.StatusCompleted, Result: []byte(`"ok"`), TTL: time.Hour}
	requireNoError(t, s.Complete(ctx, key, n1, c))
	requireNoError(t, s.Complete(ctx, key, n1, c), "a retried complete that finds its own write succeeds")
	rec, err := s.Get(ctx, key)
	requireNoError(t, err)
	assertEqual(t, []byte(`"ok"`), rec.Result)
}

func (su *suite) binaryResult(t *testing.T, s idem.Store) {
	ctx := ctxT(t)
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, ""), idem.Claimed)
	all := make([]byte, 0, 512)
	for i := 0; i < 512; i++ {
		all = append(all, byte(i))
	}
	requireNoError(t, s.Complete(ctx, key, n1, idem.Completion{Status: idem.StatusCompleted, Result: all, TTL: time.Hour}))
	rec, err := s.Get(ctx, key)
	requireNoError(t, err)
	assertTrue(t, bytes.Equal(all, rec.Result), "result bytes must round-trip exactly")
}

func (su *suite) release(t *testing.T, s idem.Store) {
	ctx := ctxT(t)
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, ""), idem.Claimed)
	assertErrorIs(t, s.Release(ctx, key, NewNonce()), idem.ErrLostOwnership)
	requireNoError(t, s.Release(ctx, key, n1))
	_, err := s.Get(ctx, key)
	assertErrorIs(t, err, idem.ErrNotFound, "a released record is not live")
	assertErrorIs(t, s.Heartbeat(ctx, key, n1, lease), idem.ErrLostOwnership, "a late heartbeat does not revive a released claim")
	_, err = s.Get(ctx, key)
	assertErrorIs(t, err, idem.ErrNotFound, "the refused heartbeat changed nothing")
	n2 := NewNonce()
	rec := mustClaim(t, s, req(key, n2, ""), idem.Claimed)
	assertEqual(t, int64(2), rec.Attempt, "attempts stay monotonic across a release")
	assertEmpty(t, rec.Result)
	assertNil(t, rec.Error)
	assertErrorIs(t, s.Release(ctx, key, n1), idem.ErrLostOwnership, "the old owner cannot release the new claim")
	requireNoError(t, s.Complete(ctx, key, n2, idem.Completion{Status: idem.StatusCompleted, Result: []byte(`1`), TTL: time.Hour}))
	assertErrorIs(t, s.Release(ctx, key, n2), idem.ErrLostOwnership, "a completed record cannot be released")
}

func (su *suite) expiry(t *testing.T, s idem.Store) {
	ctx := ctxT(t)
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, "a"), idem.Claimed)
	requireNoError(t, s.Complete(ctx, key, n1, idem.Completion{Status: idem.StatusCompleted, Result: []byte(`1`), TTL: 300 * time.Millisecond}))
	_, err := s.Get(ctx, key)
	requireNoError(t, err)
	su.sleep(450 * time.Millisecond)
	_, err = s.Get(ctx, key)
	assertErrorIs(t, err, idem.ErrNotFound, "expiry is decided by the record's expires_at")
	// An expired record is claimable even with another payload, and the
	// attempt count goes on (or, when the record expired natively and is
	// gone, starts again).
	rec := mustClaim(t, s, req(key, NewNonce(), "b"), idem.Claimed)
	if su.native {
		assertEqual(t, int64(1), rec.Attempt, "the expired record is gone")
	} else {
		assertEqual(t, int64(2), rec.Attempt)
	}
	assertEqual(t, "b", rec.PayloadHash)
	assertEqual(t, idem.StatusInProgress, rec.Status)
	assertEmpty(t, rec.Result)
	assertZero(t, rec.CompletedAt)
	// An in-progress record whose lease ran out is claimable too.
	k2 := NewKey()
	r := req(k2, NewNonce(), "")
	r.LeaseTTL, r.TakeoverAfter = 300*time.Millisecond, time.Hour
	n3 := r.Nonce
	mustClaim(t, s, r, idem.Claimed)
	su.sleep(450 * time.Millisecond)
	assertErrorIs(t, s.Heartbeat(ctx, k2, n3, lease), idem.ErrLostOwnership, "an expired claim is not revived by a heartbeat")
	r2 := req(k2, NewNonce(), "")
	r2.TakeoverAfter = time.Hour
	rec = mustClaim(t, s, r2, idem.Claimed)
	assertEqual(t, int64(2), rec.Attempt)
}

func (su *suite) getMissing(t *testing.T, s idem.Store) {
	_, err := s.Get(ctxT(t), NewKey())
	assertErrorIs(t, err, idem.ErrNotFound)
}

func (su *suite) delete(t *testing.T, s idem.Store) {
	ctx := ctxT(t)
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, ""), idem.Claimed)
	requireNoError(t, s.Delete(ctx, key))
	_, err := s.Get(ctx, key)
	assertErrorIs(t, err, idem.ErrNotFound)
	requireNoError(t, s.Delete(ctx, key), "deleting a missing record is not an error")
	assertErrorIs(t, s.Complete(ctx, key, n1, idem.Completion{Status: idem.StatusCompleted, TTL: time.Hour}), idem.ErrLostOwnership)
	mustClaim(t, s, req(key, NewNonce(), ""), idem.Claimed)
}

func (su *suite) concurrentClaim(t *testing.T, s idem.Store) {
	const n = 64
	key := NewKey()
	var claimed atomic.Int32
	nonces := make([]string, n)
	results := make([]idem.ClaimResult, n)
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
			if !assertNoError(t, err) {
				return
			}
			results[i] = res
			if res.Outcome == idem.Claimed {
				claimed.Add(1)
			}
		}(i)
	}
	close(start)
	wg.Wait()
	requireEqual(t, int32(1), claimed.Load(), "exactly one of %d concurrent claims wins", n)
	var winner string
	for i, r := range results {
		if r.Outcome == idem.Claimed {
			winner = nonces[i]
		}
	}
	for _, r := range results {
		assertEqual(t, winner, r.Record.Nonce, "every loser sees the winner's record")
	}
}

func (su *suite) concurrentTakeover(t *testing.T, s idem.Store) {
	const n = 32
	key := NewKey()
	mustClaim(t, s, req(key, NewNonce(), ""), idem.Claimed)
	su.sleep(stale)
	var took, other atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, err := s.Claim(context.Background(), req(key, NewNonce(), ""))
			if !assertNoError(t, err) {
				return
			}
			switch res.Outcome {
			case idem.TookOver:
				took.Add(1)
				assertEqual(t, int64(2), res.Record.Attempt)
			default:
				other.Add(1)
			}
		}()
	}
	close(start)
	wg.Wait()
	assertEqual(t, int32(1), took.Load(), "exactly one of %d concurrent takeovers wins", n)
}

func (su *suite) concurrentManyKeys(t *testing.T, s idem.Store) {
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
				if !assertNoError(t, err) {
					return
				}
				if res.Outcome == idem.Claimed {
					wins[i].Add(1)
					assertNoError(t, s.Complete(context.Background(), k, nonce,
						idem.Completion{Status: idem.StatusCompleted, Result: []byte(`1`), TTL: time.Minute}))
				}
			}
		}()
	}
	wg.Wait()
	for i := range wins {
		assertEqual(t, int32(1), wins[i].Load(), "key %d claimed once", i)
	}
}

func (su *suite) watch(t *testing.T, s idem.Store) {
	w, ok := s.(idem.Watcher)
	if !ok {
		t.Skip("store does not implement idem.Watcher")
	}
	ctx := ctxT(t)
	for _, op := range []string{"complete", "release"} {
		key, n1 := NewKey(), NewNonce()
		mustClaim(t, s, req(key, n1, ""), idem.Claimed)
		ch, stop, err := w.Watch(ctx, key)
		requireNoError(t, err)
		select {
		case <-ch:
			t.Fatalf("%s: watch fired before any change", op)
		case <-time.After(20 * time.Millisecond):
		}
		if op == "complete" {
			requireNoError(t, s.Complete(ctx, key, n1, idem.Completion{Status: idem.StatusCompleted, Result: []byte(`1`), TTL: time.Minute}))
		} else {
			requireNoError(t, s.Release(ctx, key, n1))
		}
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s did not wake the watcher", op)
		}
		stop()
	}
}

func (su *suite) corruptRecord(t *testing.T, s idem.Store) {
	if su.corrupt == nil {
		t.Skip("no corrupter given (storetest.WithCorrupter)")
	}
	ctx := ctxT(t)
	key, n1 := NewKey(), NewNonce()
	mustClaim(t, s, req(key, n1, ""), idem.Claimed)
	su.corrupt(t, s, key)
	_, err := s.Get(ctx, key)
	assertErrorIs(t, err, idem.ErrCorruptRecord)
	var ce *idem.CorruptRecordError
	assertTrue(t, errors.As(err, &ce), "Get returns a *idem.CorruptRecordError, got %T", err)
	_, err = s.Claim(ctx, req(key, NewNonce(), ""))
	assertErrorIs(t, err, idem.ErrCorruptRecord, "a claim must not overwrite a corrupt record")
	requireNoError(t, s.Delete(ctx, key), "a corrupt record can be deleted")
	mustClaim(t, s, req(key, NewNonce(), ""), idem.Claimed)
}

func (su *suite) contextCancelled(t *testing.T, s idem.Store) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Claim(ctx, req(NewKey(), NewNonce(), ""))
	assertError(t, err, "a claim with a cancelled context fails")
}
