package filestore_test

import (
	"path/filepath"
	"testing"

	"github.com/idem-go/idem/storekit"

	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/stores/filestore"
	"github.com/idem-go/idem/stores/storetest"
)

// corruptFile overwrites the record file of key with bytes that do not
// decode, bypassing the store.
func corruptFile(t *testing.T, s storekit.Store, key string) {
	fs, ok := s.(*filestore.Store)
	if w, isW := s.(*filestore.WatchingStore); isW {
		fs, ok = w.Store, true
	}
	require.True(t, ok, "store %T is not a filestore", s)
	writeFile(t, filestore.RecordPath(fs, key), []byte("{\"v\":1,\"key\":"))
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storekit.Store {
		s, err := filestore.New(filepath.Join(t.TempDir(), "store"))
		require.NoError(t, err)
		return s
	}, storetest.WithCorrupter(corruptFile))
}

// TestConformanceLocalWatch runs the suite on a clock it advances, so it
// checks staleness and expiry exactly and sleeps not at all.
func TestConformanceLocalWatch(t *testing.T) {
	storetest.RunWithClock(t, func(t *testing.T, c *storetest.Clock) storekit.Store {
		s, err := filestore.New(filepath.Join(t.TempDir(), "store"), filestore.WithoutSync(), filestore.WithClock(c.Now))
		require.NoError(t, err)
		return s.LocalWatch()
	}, storetest.WithCorrupter(corruptFile))
}

// TestRotation runs storetest's secret rotation checks (records under a
// previous secret, ties, releases and crashes retried under the other
// order of secrets, concurrent replays) on a file store.
func TestRotation(t *testing.T) {
	storetest.RunRotation(t, func(t *testing.T) storekit.Store {
		s, err := filestore.New(filepath.Join(t.TempDir(), "store"))
		require.NoError(t, err)
		return s
	})
}
