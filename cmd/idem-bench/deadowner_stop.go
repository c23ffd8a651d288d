package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idem-go/idem"
)

// The SIGSTOP runs: stopOwners processes, each holding a claim of its
// own, are stopped for stopPause (half of stopThreshold) while a caller
// per key tries every 100 ms; stopRounds times.
const (
	stopOwners    = 10
	stopRounds    = 10
	stopThreshold = 2 * time.Second
	stopPause     = stopThreshold / 2
)

// stopResult counts what the SIGSTOP runs saw: runs, takeovers of a
// stopped owner's claim, runs of fn by the callers, and owners that did
// not complete with their own claim after SIGCONT.
type stopResult struct {
	runs, takeovers, othersRan, ownersFailed int
}

// stopRuns plays the SIGSTOP rounds on b's store.
func (b *deadBench) stopRuns() (stopResult, error) {
	var res stopResult
	owners := make([]*deadProc, stopOwners)
	for i := range owners {
		p, err := startDead(deadEnv{role: "finish", store: b.ds.name, ns: b.ns, takeover: stopThreshold})
		if err != nil {
			return res, err
		}
		defer p.kill()
		owners[i] = p
	}
	var takeovers, othersRan atomic.Int32
	g, err := idem.New[string](b.store, idem.WithTakeoverAfter(stopThreshold),
		idem.WithObserver(func(_ context.Context, e idem.Event) {
			if e.Kind == idem.EventTakeover {
				takeovers.Add(1)
			}
		}))
	if err != nil {
		return res, err
	}
	fn := func(context.Context) (string, error) { othersRan.Add(1); return "other", nil }
	for range stopRounds {
		failed, err := stopRound(g, owners, fn)
		if err != nil {
			return res, err
		}
		res.runs += len(owners)
		res.ownersFailed += failed
	}
	res.takeovers, res.othersRan = int(takeovers.Load()), int(othersRan.Load())
	return res, nil
}

// stopRound has each owner claim a fresh key, stops them all for
// stopPause while a caller per key tries every 100 ms, resumes them and
// lets each fn return. It returns how many owners did not complete with
// their own claim, or whose result a caller did not get afterwards.
func stopRound(g *idem.Guard[string], owners []*deadProc, fn func(context.Context) (string, error)) (int, error) {
	keys := make([]string, len(owners))
	for i, p := range owners {
		keys[i] = "stop-" + randName()
		if err := p.send("claim " + keys[i]); err != nil {
			return 0, err
		}
	}
	for i, p := range owners {
		if _, err := p.expect("claimed "+keys[i], 30*time.Second); err != nil {
			return 0, err
		}
	}
	for _, p := range owners {
		p.signal(syscall.SIGSTOP)
	}
	ctx, cancel := context.WithTimeout(context.Background(), stopPause)
	var wg sync.WaitGroup
	for _, key := range keys {
		wg.Go(func() {
			for ctx.Err() == nil {
				_, _ = g.Do(context.Background(), key, fn)
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
		})
	}
	wg.Wait()
	cancel()
	for _, p := range owners {
		p.signal(syscall.SIGCONT)
	}
	failed := 0
	for i, p := range owners {
		if err := p.send("go"); err != nil {
			return 0, err
		}
		line, err := p.expect("RESULT "+keys[i], 30*time.Second)
		if err != nil {
			return 0, err
		}
		v, err := g.Do(context.Background(), keys[i], fn)
		if line != "RESULT "+keys[i]+" owner" || v != "owner" || err != nil {
			failed++
		}
	}
	return failed, nil
}

// String is the SIGSTOP row's cell.
func (r stopResult) String() string {
	return fmt.Sprintf("%d takeovers, fn run by others %d times, %d owners not completing, in %d runs",
		r.takeovers, r.othersRan, r.ownersFailed, r.runs)
}
