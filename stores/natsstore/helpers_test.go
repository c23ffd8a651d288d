package natsstore_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/stores/natsstore"
)

func connect(t testing.TB, url string) (*nats.Conn, jetstream.JetStream) {
	t.Helper()
	nc, err := nats.Connect(url, nats.Timeout(5*time.Second))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return nc, js
}

func randName(prefix string) string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// newBucket creates a fresh bucket on the test server, deleted at the end.
func newBucket(t testing.TB, js jetstream.JetStream) jetstream.KeyValue {
	t.Helper()
	name := randName("idemtest_")
	kv, err := natsstore.CreateBucket(ctxT(t), js, name)
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteKeyValue(context.Background(), name) })
	return kv
}

// requireKept fails t unless every key in keys still holds a record.
func requireKept(t *testing.T, s *natsstore.Store, keys []string) {
	t.Helper()
	for _, k := range keys {
		_, err := s.Get(ctxT(t), k)
		require.NoError(t, err, k)
	}
}
