package memstore_test

import (
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/storetest"
)

// TestConformance runs storetest's suites on memstore: its operations on
// real time and on a clock, its listing, its clean-up with retention 0
// (so that Purge has expired records to race with) and secret rotation.
func TestConformance(t *testing.T) {
	storetest.Run(t, storetest.Harness{
		NewStore: func(t *testing.T) storekit.Store { return newStore(t) },
		NewStoreWithClock: func(t *testing.T, c *storetest.Clock) storekit.Store {
			return newStore(t, memstore.WithClock(c.Now))
		},
		Watch: true,
		List: func(t *testing.T) storekit.Store {
			s := newStore(t, memstore.WithoutCleanup())
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		Purge: []storetest.Purge{{
			NewStore:  func(t *testing.T) storekit.Store { return newStore(t, memstore.WithRetention(0)) },
			Retention: 0,
			ClockSkew: 100 * time.Millisecond,
		}},
		Rotation: true,
	})
}
