package storetest_test

import (
	"testing"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/storetest"
)

type plainStore struct{ storekit.Store } // hides the Watch of what it wraps

// TestInstrumentedWatcher: the instrumented store is a Watcher exactly when
// the store it wraps is one. Before, it always was, and a Guard over a
// store that cannot watch called a Watch that always failed.
func TestInstrumentedWatcher(t *testing.T) {
	mem, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	var s storekit.Store = storetest.Instrument(plainStore{mem}).AsStore()
	if _, ok := s.(storekit.Watcher); ok {
		t.Error("an instrumented store that cannot watch presents itself as a Watcher")
	}
	if _, ok := any(storetest.Instrument(mem)).(storekit.Watcher); ok {
		t.Error("*Instrumented presents itself as a Watcher")
	}
	s = storetest.Instrument(mem).AsStore()
	if _, ok := s.(storekit.Watcher); !ok {
		t.Error("an instrumented memstore does not watch")
	}
}
