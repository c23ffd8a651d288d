package main

import (
	"fmt"
	"io"
	"slices"
	"time"
)

// The targets of the dead-owner table, with the default options.
const (
	killMedianTarget  = time.Second     // (a), (b): median on a store with presence
	killWorstTarget   = 2 * time.Second // (a), (b): worst on a store with presence
	restartTarget     = time.Second     // (c): every run, on every store
	deadBeforeSummary = "the 30s threshold"
)

// printDeadTable prints the dead-owner table as Markdown, then the errors.
func printDeadTable(out io.Writer, n int, results []*deadResult) {
	fmt.Fprintf(out, "SIGKILL at a random point inside fn; median / worst (runs); after: the store as it is, default options;\n")
	fmt.Fprintf(out, "before: its presence hidden from the Guard, default options (%s). %d runs after.\n\n", deadBeforeSummary, n)
	fmt.Fprintln(out, "| store | measure | after | before | target | met |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|")
	for _, r := range results {
		if r.skipped != "" {
			fmt.Fprintf(out, "| %s | skipped: %s | | | | |\n", r.name, r.skipped)
			continue
		}
		killTarget, killMet := "median < 1s, worst < 2s", func(ds []time.Duration) string { return met(ds, killMedianTarget, killWorstTarget) }
		if !r.presence {
			killTarget, killMet = "none: no presence, keeps the threshold", func([]time.Duration) string { return "-" }
		}
		fmt.Fprintf(out, "| %s | (a) waiter (Wait): kill → result | %s | %s | %s | %s |\n", r.name,
			medianWorst(r.waitAfter), medianWorst(r.waitBefore), killTarget, killMet(r.waitAfter))
		fmt.Fprintf(out, "| %s | (b) retrier (Return, every 100 ms): kill → first success | %s | %s | %s | %s |\n", r.name,
			medianWorst(r.retryAfter), medianWorst(r.retryBefore), killTarget, killMet(r.retryAfter))
		fmt.Fprintf(out, "| %s | (c) restart, same WithInstanceID: kill → its result | %s | %s (not measured) | < 1s | %s |\n", r.name,
			medianWorst(r.restart), deadBeforeSummary, met(r.restart, restartTarget, restartTarget))
		stopMet := "yes"
		if r.stop.runs < stopOwners*stopRounds || r.stop.takeovers > 0 || r.stop.othersRan > 0 || r.stop.ownersFailed > 0 {
			stopMet = "NO"
		}
		fmt.Fprintf(out, "| %s | (d) SIGSTOP %v, threshold %v | %s | | 0 takeovers, 0 runs by others | %s |\n", r.name,
			stopPause, stopThreshold, r.stop, stopMet)
	}
	for _, r := range results {
		for _, e := range r.errs {
			fmt.Fprintf(out, "\n%s: error: %s", r.name, e)
		}
	}
	fmt.Fprintln(out)
}

// met says whether the median of ds is under medianTarget and its worst
// under worstTarget.
func met(ds []time.Duration, medianTarget, worstTarget time.Duration) string {
	if len(ds) == 0 {
		return "NO (no run)"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	if median(s) < medianTarget && s[len(s)-1] < worstTarget {
		return "yes"
	}
	return "NO"
}
