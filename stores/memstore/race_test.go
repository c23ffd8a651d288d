package memstore_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/storetest"
)

// TestCleanupNeverRemovesLiveRecord: workers release a claim (its record
// is then expired, with no retention) and claim the key again at once (a
// lease of an hour: the 480 s the workers advance the clock in all never
// lapse it),
// while the clean-up and four loops of Purge calls run beside them. The
// second claim's heartbeat and completion must find its record: a removal
// that judged the record by an earlier reading (expired when read, live
// again when removed) loses it, and its owner's heartbeat fails with
// storekit.ErrLostOwnership.
func TestCleanupNeverRemovesLiveRecord(t *testing.T) {
	clock := newFakeClock()
	s := newStore(t, memstore.WithClock(clock.Now), memstore.WithRetention(0), memstore.WithCleanup(time.Millisecond))
	defer s.Close()
	ctx := context.Background()
	const workers, rounds = 16, 10000
	var (
		done   atomic.Bool
		purged atomic.Int64
		wg     sync.WaitGroup
	)
	for range 4 { // Purge beside the clean-up goroutine
		go func() {
			for !done.Load() {
				n, _ := s.Purge(ctx)
				purged.Add(int64(n))
			}
		}()
	}
	defer done.Store(true)
	claim := func(key string) (string, bool) {
		nonce := storetest.NewNonce()
		res, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: nonce, LeaseTTL: time.Hour, TakeoverAfter: time.Hour})
		if err != nil || (res.Outcome != storekit.Claimed && res.Outcome != storekit.TookOver) {
			t.Errorf("claim %s: %v, %v", key, res.Outcome, err)
			return "", false
		}
		return nonce, true
	}
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := storetest.NewKey()
			for i := range rounds {
				if t.Failed() {
					return
				}
				n1, ok := claim(key)
				if !ok {
					return
				}
				if err := s.Release(ctx, key, n1); err != nil {
					t.Errorf("worker %d round %d: release: %v", w, i, err)
					return
				}
				n2, ok := claim(key)
				if !ok {
					return
				}
				clock.Advance(time.Millisecond)
				if err := s.Heartbeat(ctx, key, n2, time.Hour); err != nil {
					t.Errorf("worker %d round %d: heartbeat of a live claim: %v", w, i, err)
					return
				}
				if err := s.Complete(ctx, key, n2, storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`1`), TTL: time.Millisecond}); err != nil {
					t.Errorf("worker %d round %d: complete of a live claim: %v", w, i, err)
					return
				}
				clock.Advance(2 * time.Millisecond) // the completed record expires
			}
		}()
	}
	wg.Wait()
	// Writes remove most expired records themselves (16 each), so Purge
	// removes few: each is a race won by the removal.
	t.Logf("%d records removed by Purge beside %d claim cycles, %d clean-up passes", purged.Load(), workers*rounds, s.CleanupPasses())
}
