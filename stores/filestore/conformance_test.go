package filestore_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
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

// TestConformance runs storetest's suites on file stores, each on a
// directory of its own: the store on real time; on a clock the suite
// advances, through LocalWatch (no sleeping, timestamps checked exactly);
// its listing; its clean-up with retention 0; secret rotation; processes
// sharing one directory (with -short, none); and owners killed or stopped
// in the middle of a call's steps.
func TestConformance(t *testing.T) {
	// Each store is closed before its directory is removed: its
	// background clean-up must not be walking the directory then.
	newStore := func(t *testing.T) storekit.Store {
		s, err := filestore.New(filepath.Join(t.TempDir(), "store"))
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	h := storetest.Harness{
		NewStore: newStore,
		NewStoreWithClock: func(t *testing.T, c *storetest.Clock) storekit.Store {
			s, err := filestore.New(filepath.Join(t.TempDir(), "store"), filestore.WithoutSync(), filestore.WithClock(c.Now))
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s.LocalWatch()
		},
		Corrupt: corruptFile,
		List: func(t *testing.T) storekit.Store {
			s, err := filestore.New(t.TempDir(), filestore.WithoutCleanup())
			require.NoError(t, err)
			t.Cleanup(func() { _ = s.Close() })
			return s
		},
		Purge: []storetest.Purge{{
			NewStore: func(t *testing.T) storekit.Store {
				s, err := filestore.New(t.TempDir(), filestore.WithoutSync(), filestore.WithRetention(0))
				require.NoError(t, err)
				return s
			},
			Retention: 0,
			ClockSkew: 100 * time.Millisecond,
		}},
		Rotation: true,
		StepCrash: &storetest.StepCrashConfig{
			Namespace: filepath.Join(t.TempDir(), "store"),
			NewStore:  func(dir string) (storekit.Store, error) { return filestore.New(dir) },
		},
		DeadOwner: &storetest.DeadOwnerConfig{
			Namespace: filepath.Join(t.TempDir(), "dead"),
			NewStore:  func(dir string) (storekit.Store, error) { return filestore.New(dir) },
			Presence:  true,
		},
	}
	if !testing.Short() { // the process suites spawn processes
		// 4 processes x 16 goroutines, each with its own Guard, on the same
		// keys in one directory. No crash here: a long threshold keeps a
		// loaded machine's slow fsync or scheduling from making a live
		// owner look stale.
		h.Processes = &storetest.ProcessConfig{
			Keys:     60,
			Options:  []idem.Option{idem.WithTakeoverAfter(20 * time.Second), idem.WithHeartbeat(2 * time.Second)},
			NewStore: func(ns string) (storekit.Store, error) { return newProcessStore(t, ns) },
		}
		// Six processes, each with another order of three secrets, x 4
		// goroutines, on the same 30 keys, with a 2s threshold.
		h.RotationOrders = &storetest.ProcessConfig{
			Goroutines: 4,
			Keys:       30,
			Options:    []idem.Option{idem.WithTakeoverAfter(2 * time.Second)},
			NewStore:   func(ns string) (storekit.Store, error) { return newProcessStore(t, ns) },
		}
	}
	storetest.Run(t, h)
}

// newProcessStore opens the store of a process suite on a directory named
// after ns, shared by the processes, removed at the end of t.
func newProcessStore(t *testing.T, ns string) (storekit.Store, error) {
	dir := filepath.Join(os.TempDir(), "idem-filestore-"+ns)
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return filestore.New(dir)
}
