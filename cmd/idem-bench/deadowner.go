package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"slices"
	"sync"
	"time"
)

// deadResult is what the dead-owner table shows of one store.
type deadResult struct {
	name     string
	skipped  string // why the store was not measured, "" if it was
	presence bool
	// (a) the waiter's and (b) the retrier's time from the kill to the
	// result, after (the store as it is) and before (presence hidden).
	waitAfter, retryAfter, waitBefore, retryBefore []time.Duration
	restart                                        []time.Duration // (c)
	stop                                           stopResult      // (d)
	errs                                           []string
}

// runDeadOwner prints the dead-owner table: n runs of each measurement
// per store, before runs of the before column (each waits for the 30s
// threshold; they run in the background, all stores at once, while the
// after column is measured), on the stores selected. It returns the exit
// code.
func runDeadOwner(out io.Writer, n, before int, selected func(string) bool) int {
	if n < 1 || before < 0 {
		fmt.Fprintln(os.Stderr, "-deadowner must be positive, -deadowner-before not negative")
		return 2
	}
	ctx := context.Background()
	start := time.Now()
	var (
		results []*deadResult
		benches []*deadBench
	)
	for _, ds := range deadStores() {
		if !selected(ds.name) {
			continue
		}
		r := &deadResult{name: ds.name, presence: ds.presence}
		results = append(results, r)
		b, err := openBench(ctx, ds)
		if err != nil {
			r.skipped = err.Error()
			fmt.Fprintf(out, "%s: skipped: %v\n", ds.name, err)
			benches = append(benches, nil)
			continue
		}
		defer b.close(ctx)
		benches = append(benches, b)
	}
	var wg sync.WaitGroup
	for i, b := range benches {
		if b != nil {
			wg.Go(func() { b.measureBefore(results[i], before) })
		}
	}
	for i, b := range benches {
		if b != nil {
			fmt.Fprintf(out, "%s: measuring (%v so far)\n", b.ds.name, time.Since(start).Round(time.Second))
			b.measureAfter(results[i], n)
		}
	}
	wg.Wait()
	fmt.Fprintf(out, "measured in %v\n\n", time.Since(start).Round(time.Second))
	printDeadTable(out, n, results)
	return 0
}

// openBench opens ds on a fresh namespace, creating what it needs.
func openBench(ctx context.Context, ds deadStore) (*deadBench, error) {
	addr := ""
	if ds.env != "" {
		if addr = os.Getenv(ds.env); addr == "" {
			return nil, fmt.Errorf("%s is not set", ds.env)
		}
	}
	ns, err := ds.newNS()
	if err != nil {
		return nil, err
	}
	s, closeStore, err := ds.open(ctx, addr, ns, true)
	if err != nil {
		_ = ds.drop(ctx, addr, ns)
		return nil, err
	}
	return &deadBench{ds: ds, ns: ns, store: s, addr: addr, closeStore: closeStore}, nil
}

// close closes the store and removes its namespace.
func (b *deadBench) close(ctx context.Context) {
	b.closeStore()
	if err := b.ds.drop(ctx, b.addr, b.ns); err != nil {
		fmt.Fprintf(os.Stderr, "%s: clean-up of %s: %v\n", b.ds.name, b.ns, err)
	}
}

// measureBefore runs the before column: the store's presence hidden, the
// default 30s threshold. A store without presence is the same after: its
// after column of (a) and (b) is measured here too, as many times.
func (b *deadBench) measureBefore(r *deadResult, before int) {
	for range before {
		w, rt, err := b.killRun(true)
		r.add(&r.waitBefore, &r.retryBefore, w, rt, "before", err)
		if !b.ds.presence {
			w, rt, err := b.killRun(false)
			r.add(&r.waitAfter, &r.retryAfter, w, rt, "after", err)
		}
	}
}

// measureAfter runs the after column: n kills (a store with presence), n
// restarts, and the SIGSTOP rounds.
func (b *deadBench) measureAfter(r *deadResult, n int) {
	for range n {
		if !b.ds.presence {
			break
		}
		w, rt, err := b.killRun(false)
		r.add(&r.waitAfter, &r.retryAfter, w, rt, "after", err)
	}
	for range n {
		d, err := b.restartRun()
		if err != nil {
			r.fail("restart", err)
			continue
		}
		deadMu.Lock()
		r.restart = append(r.restart, d)
		deadMu.Unlock()
	}
	stop, err := b.stopRuns()
	if err != nil {
		r.fail("SIGSTOP", err)
	}
	deadMu.Lock()
	r.stop = stop
	deadMu.Unlock()
}

// fail records an error of the measurement what.
func (r *deadResult) fail(what string, err error) {
	deadMu.Lock()
	defer deadMu.Unlock()
	r.errs = append(r.errs, what+": "+err.Error())
}

var deadMu sync.Mutex // guards the deadResults written by both columns

func (r *deadResult) add(wait, retry *[]time.Duration, w, rt time.Duration, col string, err error) {
	if err != nil {
		r.fail(col, err)
		return
	}
	deadMu.Lock()
	defer deadMu.Unlock()
	*wait, *retry = append(*wait, w), append(*retry, rt)
}

// medianWorst is "median / worst (runs)" of ds, "-" when empty.
func medianWorst(ds []time.Duration) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return fmt.Sprintf("%s / %s (%d)", roundD(median(s)), roundD(s[len(s)-1]), len(s))
}

func roundD(d time.Duration) string {
	if d >= 10*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Millisecond).String()
}

// median is the median of sorted s (not empty).
func median(s []time.Duration) time.Duration {
	m := len(s) / 2
	if len(s)%2 == 0 {
		return (s[m-1] + s[m]) / 2
	}
	return s[m]
}
