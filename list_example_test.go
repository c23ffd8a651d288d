package idem_test

import (
	"fmt"
	"time"

	"github.com/idem-go/idem/storekit"
)

// ExampleRecord_State classifies records as idem ls does: an in-progress
// record whose heartbeat is older than its owner's takeover threshold is
// stale.
func ExampleRecord_State() {
	now := time.Now().UnixMilli()
	running := &storekit.Record{Status: storekit.StatusInProgress, HeartbeatAt: now - 1000, TakeoverMs: 30_000}
	stuck := &storekit.Record{Status: storekit.StatusInProgress, HeartbeatAt: now - 60_000, TakeoverMs: 30_000}
	done := &storekit.Record{Status: storekit.StatusCompleted}
	for _, r := range []*storekit.Record{running, stuck, done} {
		fmt.Println(r.State(now, 30*time.Second))
	}
	s, err := storekit.ParseRecordState("stale")
	fmt.Println(s, err)
	// Output:
	// in_progress
	// stale
	// completed
	// stale <nil>
}
