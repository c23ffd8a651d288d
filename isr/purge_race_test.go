package isr_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/isrtest"
)

// TestFileTablePurgeRace: a clean-up running without pause beside workers
// that take expired leases over never removes a live LOCK. Each round
// moves the clock past every lease's ttl, so the clean-up finds every LOCK
// expired while the workers write new ones over them; a worker then reads
// its own LOCK back. A clean-up that removed by what it read before taking
// the cache key's lock would remove new leases.
func TestFileTablePurgeRace(t *testing.T) {
	clock := isrtest.NewClock(isrtest.Base())
	tb, err := isr.NewFileTable(t.TempDir(), isr.WithTableClock(clock.Now), isr.WithoutCleanup(), isr.WithoutFileSync())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var purged atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for ctx.Err() == nil {
			n, err := tb.Purge(ctx)
			if err != nil && ctx.Err() == nil {
				t.Error(err)
				return
			}
			purged.Add(int64(n))
		}
	}()
	const workers, rounds = 8, 150
	pks := make([]string, workers)
	for i := range pks {
		pks[i] = isrtest.NewPK(t)
	}
	lost := 0
	for round := range rounds {
		clock.Advance(10 * time.Second)
		now := clock.Now()
		var mu sync.Mutex
		var rw sync.WaitGroup
		for w, pk := range pks {
			rw.Add(1)
			go func() {
				defer rw.Done()
				tok := fmt.Sprintf("r%d-w%d", round, w)
				exp := now.Unix() + 2
				if _, err := tb.AcquireLease(ctx, isr.AcquireInput{PK: pk, Token: tok, Now: now, ExpiresAt: exp, TTL: exp + 1}); err != nil {
					t.Errorf("acquire: %v", err)
					return
				}
				// Give the clean-up time to act on what it read before.
				time.Sleep(time.Millisecond)
				l, err := tb.GetLease(ctx, pk)
				if err != nil || l.Token != tok {
					mu.Lock()
					lost++
					mu.Unlock()
				}
			}()
		}
		rw.Wait()
	}
	cancel()
	wg.Wait()
	if lost > 0 {
		t.Fatalf("%d live leases removed by the clean-up (of %d)", lost, workers*rounds)
	}
	if purged.Load() == 0 {
		t.Fatal("the clean-up removed nothing: the race was not exercised")
	}
	t.Logf("%d expired LOCKs removed beside %d acquires", purged.Load(), workers*rounds)
}
