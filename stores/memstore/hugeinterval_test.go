package memstore_test

import (
	"math"
	"testing"
	"time"

	"github.com/idem-go/idem/stores/memstore"
)

// TestHugeCleanupInterval: WithCleanup(math.MaxInt64) means rarely: an
// idle store runs no pass in a quarter second. (The wait wrapped negative,
// and an idle store ran passes back to back.)
func TestHugeCleanupInterval(t *testing.T) {
	s := newStore(t, memstore.WithCleanup(math.MaxInt64))
	defer s.Close()
	time.Sleep(250 * time.Millisecond)
	if n := s.CleanupPasses(); n != 0 {
		t.Fatalf("%d passes in 250ms with WithCleanup(MaxInt64)", n)
	}
}
