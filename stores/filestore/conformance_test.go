package filestore_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/filestore"
	"github.com/idem-go/idem/stores/storetest"
)

// corruptFile overwrites the record file of key with bytes that do not
// decode, bypassing the store.
func corruptFile(t *testing.T, s idem.Store, key string) {
	d, ok := s.(interface{ Dir() string })
	require.True(t, ok, "store %T has no Dir", s)
	require.NoError(t, os.WriteFile(filepath.Join(d.Dir(), key), []byte("{\"v\":1,\"key\":"), 0o600))
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) idem.Store {
		s, err := filestore.New(filepath.Join(t.TempDir(), "store"))
		require.NoError(t, err)
		return s
	}, storetest.WithCorrupter(corruptFile))
}

func TestConformanceLocalWatch(t *testing.T) {
	storetest.Run(t, func(t *testing.T) idem.Store {
		// Durability is covered above; without fsync this run adds less
		// disk load to the suite's tight (300ms) takeover timing.
		s, err := filestore.New(filepath.Join(t.TempDir(), "store"), filestore.WithoutSync())
		require.NoError(t, err)
		return s.LocalWatch()
	}, storetest.WithCorrupter(corruptFile))
}
