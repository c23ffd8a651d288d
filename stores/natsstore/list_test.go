package natsstore_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/natsstore"
	"github.com/idem-go/idem/stores/storetest"
)

func TestRecords(t *testing.T) {
	_, js := connect(t, testenv.NATSURL(t))
	t.Run("stream", func(t *testing.T) {
		s, err := natsstore.New(newBucket(t, js), natsstore.WithoutCleanup(), natsstore.WithJetStream(js))
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		storetest.RunList(t, s)
	})
	t.Run("watch", func(t *testing.T) {
		s, err := natsstore.New(newBucket(t, js), natsstore.WithoutCleanup())
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		storetest.RunList(t, s)
	})
}
