package storetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"
)

// Purger is a store that removes expired records on request, as every
// store that cleans up after itself does. Purge removes the records whose
// ExpiresAt plus the store's retention has passed on the store's clock,
// read when it removes each (not when it listed them), and returns how
// many it removed.
//
// When the store under test is a Purger, the RealTime and Clock suites check that
// its clean-up never removes a live record: not a record that lives on,
// nor one that a claim, heartbeat or completion revives or extends while
// Purge runs (see the package doc).
type Purger interface {
	Purge(ctx context.Context) (int, error)
}

// farPast is how far the suite moves a Clock past a record's expiry to
// make it eligible for removal when the store's retention is not declared.
const farPast = 30 * 24 * time.Hour

// purgeTests are the subtests run when the store is a Purger.
var purgeTests = []subtest{
	{"PurgeKeepsLive", (*suite).purgeKeepsLive},
	{"PurgeAfterRetention", (*suite).purgeAfterRetention},
	{"PurgeRace", (*suite).purgeRace},
}

func purger(t *testing.T, s storekit.Store) Purger {
	t.Helper()
	p, ok := s.(Purger)
	if !ok {
		t.Skip("store does not implement storetest.Purger")
	}
	return p
}

func purge(t *testing.T, p Purger) int {
	t.Helper()
	n, err := p.Purge(ctxT(t))
	if err != nil {
		t.Fatalf("Purge: %v", err)
	}
	if n < 0 {
		t.Fatalf("Purge removed %d records", n)
	}
	return n
}

// purgeKeepsLive: Purge removes no live record, whatever its state: a
// fresh claim, a stale one, a heartbeated one, a completed and a failed
// record. Each is there after it, with its owner, and its owner's
// heartbeat and completion still succeed.
func (su *suite) purgeKeepsLive(t *testing.T, s storekit.Store) {
	p := purger(t, s)
	ctx := ctxT(t)
	type rec struct {
		key, nonce string
		status     storekit.Status
	}
	var recs []rec
	claim := func(status storekit.Status) rec {
		r := rec{NewKey(), NewNonce(), status}
		mustClaim(t, s, req(r.key, r.nonce, ""), storekit.Claimed)
		if status != storekit.StatusInProgress {
			c := storekit.Completion{Status: status, Result: []byte(`1`), TTL: time.Hour}
			if status == storekit.StatusFailed {
				c = storekit.Completion{Status: status, Error: &storekit.RecordedFailure{Message: "no", Type: "test"}, TTL: time.Hour}
			}
			if err := s.Complete(ctx, r.key, r.nonce, c); err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
		}
		recs = append(recs, r)
		return r
	}
	claim(storekit.StatusInProgress) // stale by the time Purge runs
	beaten := claim(storekit.StatusInProgress)
	claim(storekit.StatusCompleted)
	claim(storekit.StatusFailed)
	su.sleep(stale)
	claim(storekit.StatusInProgress)
	if err := s.Heartbeat(ctx, beaten.key, beaten.nonce, lease); err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	purge(t, p)
	for _, r := range recs {
		got, err := s.Get(ctx, r.key)
		if err != nil {
			t.Fatalf("Purge removed a live %s record: Get: %v", r.status, err)
		}
		if got.Nonce != r.nonce || got.Status != r.status || got.Attempt != 1 {
			t.Errorf("after Purge: got %s#%d %s, want %s#1 %s", got.Nonce, got.Attempt, got.Status, r.nonce, r.status)
		}
		if r.status == storekit.StatusInProgress {
			if err := s.Heartbeat(ctx, r.key, r.nonce, lease); err != nil {
				t.Errorf("heartbeat after Purge: %v", err)
			}
			if err := s.Complete(ctx, r.key, r.nonce, storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Hour}); err != nil {
				t.Errorf("complete after Purge: %v", err)
			}
		}
	}
}

// purgeAfterRetention: Purge keeps an expired record until its ExpiresAt
// plus the retention has passed (the next claim goes on counting attempts)
// and removes it after (the next claim starts again at attempt 1). Without
// a declared retention (a Purge run) the suite does not know when that is, and checks only
// that Purge runs.
func (su *suite) purgeAfterRetention(t *testing.T, s storekit.Store) {
	p := purger(t, s)
	ctx := ctxT(t)
	const ttl = 100 * time.Millisecond
	// complete makes a completed record that expires ttl after now, and
	// returns its ExpiresAt as the store set it.
	complete := func() (string, int64) {
		key, n := NewKey(), NewNonce()
		mustClaim(t, s, req(key, n, ""), storekit.Claimed)
		if err := s.Complete(ctx, key, n, storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`1`), TTL: ttl}); err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		rec, err := s.Get(ctx, key)
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return key, rec.ExpiresAt
	}
	attempt := func(key string) int64 {
		r := req(key, NewNonce(), "")
		r.TakeoverAfter = time.Hour
		return mustClaim(t, s, r, storekit.Claimed).Attempt
	}
	if !su.retentionKnown {
		purge(t, p)
		t.Skip("the store's retention is not declared (declare it with a Harness.Purge run): when Purge removes a record is not checked")
	}
	if su.clock != nil {
		kept, exp := complete()
		gone, _ := complete()
		su.clock.Advance(time.UnixMilli(exp).Add(su.retention - time.Millisecond).Sub(su.clock.Now()))
		purge(t, p)
		if su.retention < time.Millisecond {
			// Not yet expired: a live record.
			if _, err := s.Get(ctx, kept); err != nil {
				t.Errorf("Purge removed a record 1ms before it expired: Get: %v", err)
			}
		} else if a := attempt(kept); a != 2 {
			t.Errorf("Purge removed a record 1ms before its retention ended: the next claim got attempt %d, want 2", a)
		}
		su.clock.Advance(2 * time.Millisecond)
		purge(t, p)
		if a := attempt(gone); a != 1 {
			t.Errorf("Purge kept a record 1ms past its retention: the next claim got attempt %d, want 1", a)
		}
		return
	}
	if su.retention > 5*time.Second {
		t.Skipf("retention %v: too long to wait for on real time", su.retention)
	}
	if su.retention >= 2*time.Second {
		// Kept while its retention runs, if the machine keeps up.
		began := time.Now()
		key, _ := complete()
		time.Sleep(ttl + 100*time.Millisecond)
		purge(t, p)
		if time.Since(began)+su.skew < ttl+su.retention {
			if a := attempt(key); a != 2 {
				t.Errorf("Purge removed a record within its retention: the next claim got attempt %d, want 2", a)
			}
		} else {
			t.Logf("the machine overran the retention (%v); the record's keeping is not checked", su.retention)
		}
	}
	key, _ := complete()
	time.Sleep(ttl + su.retention + su.skew + 100*time.Millisecond)
	purge(t, p)
	if a := attempt(key); a != 1 {
		t.Errorf("Purge kept a record past its retention: the next claim got attempt %d, want 1", a)
	}
}

// Racing rounds: each round makes raceKeys records eligible for removal,
// then races a fresh claim on each against Purge, then each new owner's
// heartbeat against Purge, then its completion against Purge. A Purge
// that removes a record by what it read before the claim revived it
// (list the expired, then delete them unconditionally) loses the new
// claim: a second claim then wins too, and fn would run twice.
const (
	raceRounds = 20
	raceKeys   = 8
	raceLease  = 40 * time.Millisecond // real time: the lease that expires
)

// purgeRace: a claim, heartbeat or completion racing Purge on the same
// key never loses.
func (su *suite) purgeRace(t *testing.T, s storekit.Store) {
	p := purger(t, s)
	ctx := ctxT(t)
	rounds := su.purgeRaceRounds()
	var removed int
	for round := range rounds {
		keys := su.expiredClaims(t, s)
		owners := make([]string, raceKeys)
		for i := range owners {
			owners[i] = NewNonce()
		}
		removed += raceWithPurge(ctx, t, p, "claim", round, keys, func(i int) error {
			r := req(keys[i], owners[i], "")
			r.TakeoverAfter = time.Hour
			res, err := s.Claim(ctx, r)
			if err != nil {
				return err
			}
			if res.Outcome != storekit.Claimed {
				return fmt.Errorf("got %v, want %v on an expired record", res.Outcome, storekit.Claimed)
			}
			return nil
		})
		su.checkOwned(t, s, keys, owners, round, "claim", storekit.StatusInProgress)
		removed += raceWithPurge(ctx, t, p, "heartbeat", round, keys, func(i int) error {
			return s.Heartbeat(ctx, keys[i], owners[i], lease)
		})
		su.checkOwned(t, s, keys, owners, round, "heartbeat", storekit.StatusInProgress)
		removed += raceWithPurge(ctx, t, p, "complete", round, keys, func(i int) error {
			return s.Complete(ctx, keys[i], owners[i], storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`1`), TTL: time.Hour})
		})
		su.checkOwned(t, s, keys, owners, round, "complete", storekit.StatusCompleted)
		if t.Failed() {
			return
		}
	}
	t.Logf("%d rounds of %d keys; Purge removed %d records", rounds, raceKeys, removed)
}

// purgeRaceRounds returns how many rounds purgeRace runs. On real time
// each round waits for its records to expire: about a second of waiting
// in all. Without a declared retention the records may not be eligible
// within a round: the race is checked, but Purge may have nothing to race
// with.
func (su *suite) purgeRaceRounds() int {
	if su.clock != nil {
		return raceRounds
	}
	rounds := int(time.Second / (raceLease + su.retention + 20*time.Millisecond))
	if !su.retentionKnown {
		rounds = 4
	}
	return min(max(rounds, 1), raceRounds)
}

// expiredClaims claims raceKeys new keys with a raceLease lease and lets
// them expire, past retention, and returns the keys.
func (su *suite) expiredClaims(t *testing.T, s storekit.Store) []string {
	t.Helper()
	keys := make([]string, raceKeys)
	for i := range keys {
		keys[i] = NewKey()
		r := req(keys[i], NewNonce(), "")
		r.LeaseTTL, r.TakeoverAfter = raceLease, time.Hour
		mustClaim(t, s, r, storekit.Claimed)
	}
	switch {
	case su.clock != nil && su.retentionKnown:
		su.clock.Advance(raceLease + su.retention + time.Millisecond)
	case su.clock != nil:
		su.clock.Advance(farPast)
	default:
		// A store whose clock runs behind may find them not yet
		// eligible: then Purge has nothing to race with, which is no
		// failure.
		time.Sleep(raceLease + su.retention + 20*time.Millisecond)
	}
	return keys
}

// raceWithPurge runs op (what, in round) on every key beside two Purges,
// all at once, fails the test with their errors, and returns how many
// records the Purges removed.
func raceWithPurge(ctx context.Context, t *testing.T, p Purger, what string, round int, keys []string, op func(i int) error) int {
	t.Helper()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var errs []error
	removed := 0
	start := make(chan struct{})
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			n, err := p.Purge(ctx)
			mu.Lock()
			removed += n
			if err != nil {
				errs = append(errs, fmt.Errorf("purge beside %s: %w", what, err))
			}
			mu.Unlock()
		}()
	}
	for i := range keys {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			// Spread the operations over the Purges' run, so that some
			// land between what a Purge read and what it removes.
			for range i % 4 {
				runtime.Gosched()
			}
			if err := op(i); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("%s beside Purge (round %d, key %d): %w", what, round, i, err))
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	return removed
}

// checkOwned checks that the record of every key is the owner's, with
// status: a second claim finds it, it does not win.
func (su *suite) checkOwned(t *testing.T, s storekit.Store, keys, owners []string, round int, after string, status storekit.Status) {
	t.Helper()
	for i, key := range keys {
		r := req(key, NewNonce(), "")
		r.TakeoverAfter = time.Hour
		res := claimOutcome(t, s, r)
		if res.Outcome != storekit.Existing || res.Record.Nonce != owners[i] || res.Record.Status != status {
			t.Fatalf("round %d, key %d: after a %s raced Purge, a second claim got %v of %s#%d %s, want %v of %s %s: Purge removed a live record, and fn would run twice",
				round, i, after, res.Outcome, res.Record.Nonce, res.Record.Attempt, res.Record.Status, storekit.Existing, owners[i], status)
		}
	}
}
