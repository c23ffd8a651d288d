package idem_test

import (
	"fmt"
	"time"

	"github.com/idem-go/idem"
)

// ExampleRecord_State classifies records as idem ls does: an in-progress
// record whose heartbeat is older than its owner's takeover threshold is
// stale.
func ExampleRecord_State() {
	now := time.Now().UnixMilli()
	running := &idem.Record{Status: idem.StatusInProgress, HeartbeatAt: now - 1000, TakeoverMs: 30_000}
	stuck := &idem.Record{Status: idem.StatusInProgress, HeartbeatAt: now - 60_000, TakeoverMs: 30_000}
	done := &idem.Record{Status: idem.StatusCompleted}
	for _, r := range []*idem.Record{running, stuck, done} {
		fmt.Println(r.State(now, idem.DefaultTakeoverAfter))
	}
	s, err := idem.ParseRecordState("stale")
	fmt.Println(s, err)
	// Output:
	// in_progress
	// stale
	// completed
	// stale <nil>
}
