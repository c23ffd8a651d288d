package natsstore_test

import (
	"bytes"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/natsstore"
)

// cleaners counts the goroutines of clean-ups (storekit.StartCleaner's)
// running in the process.
func cleaners() int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return bytes.Count(buf[:n], []byte("storekit.StartCleaner.func"))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// TestDroppedStoreStopsCleanup: Stores dropped without Close do not keep
// their clean-up goroutines once they are collected, as the other stores
// do. (20 dropped Stores kept 20 goroutines, which logged a warning every
// interval once their connection closed.)
func TestDroppedStoreStopsCleanup(t *testing.T) {
	const n = 20
	_, js := connect(t, testenv.NATSURL(t))
	kv := newBucket(t, js)
	// Earlier tests' dropped Stores may still be ending their clean-up:
	// count from a settled number.
	runtime.GC()
	before := cleaners()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
		runtime.GC()
		now := cleaners()
		if now == before {
			break
		}
		before = now
	}
	for range n {
		_, err := natsstore.New(kv, natsstore.WithCleanup(10*time.Millisecond))
		require.NoError(t, err)
	}
	require.GreaterOrEqual(t, cleaners(), before+n)
	require.Eventually(t, func() bool {
		runtime.GC()
		return cleaners() <= before
	}, 10*time.Second, 20*time.Millisecond, "dropped Stores' clean-up goroutines still running")
}
