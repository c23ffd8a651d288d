package filestore_test

import (
	"math"
	"testing"
	"time"

	"github.com/idem-go/idem/stores/filestore"
)

// TestHugeCleanupInterval: WithCleanup(math.MaxInt64) means rarely: no
// pass runs in a quarter second. (The wait wrapped negative, and a store
// ran about 13,000 passes a second.)
func TestHugeCleanupInterval(t *testing.T) {
	s, _ := newStore(t, filestore.WithoutSync(), filestore.WithCleanup(math.MaxInt64))
	t.Cleanup(func() { _ = s.Close() })
	time.Sleep(250 * time.Millisecond)
	if ran, skipped := filestore.CleanPasses(s); ran+skipped != 0 {
		t.Fatalf("%d passes (%d skipped) in 250ms with WithCleanup(MaxInt64)", ran+skipped, skipped)
	}
}
