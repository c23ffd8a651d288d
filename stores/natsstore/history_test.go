package natsstore_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/natsstore"
	"github.com/idem-go/idem/stores/storetest"
)

// TestHistoryRefused: a bucket that keeps more than one revision per key
// is refused by New with an error matching storekit.ErrInvalidOption that
// names the history. (New accepted it, and a listing then yielded a
// completed key's earlier revision as a call in progress.)
func TestHistoryRefused(t *testing.T) {
	_, js := connect(t, testenv.NATSURL(t))
	name := randName("idemtest_")
	kv, err := js.CreateKeyValue(ctxT(t), jetstream.KeyValueConfig{Bucket: name, History: 5})
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteKeyValue(context.Background(), name) })
	_, err = natsstore.New(kv, natsstore.WithoutCleanup())
	require.ErrorIs(t, err, storekit.ErrInvalidOption)
	require.Contains(t, err.Error(), "history of 5")
}

// TestHistoryRaisedLater: a bucket whose history is raised over 1 after
// New is refused at the next status read: a listing reports the error
// instead of yielding a key's older revision, and so does a pass.
func TestHistoryRaisedLater(t *testing.T) {
	_, js := connect(t, testenv.NATSURL(t))
	name := randName("idemtest_")
	kv, err := js.CreateKeyValue(ctxT(t), jetstream.KeyValueConfig{Bucket: name, History: 1})
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteKeyValue(context.Background(), name) })
	s, err := natsstore.New(kv, natsstore.WithoutCleanup(), natsstore.WithJetStream(js))
	require.NoError(t, err)
	ctx := ctxT(t)
	key := storetest.NewKey()
	_, err = s.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: "n", LeaseTTL: time.Hour, TakeoverAfter: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, key, "n", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("1"), TTL: time.Hour}))

	_, err = js.UpdateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: name, History: 5})
	require.NoError(t, err)
	// Get reads a key's last revision: a key written now is in the
	// stream twice, its claim beside its completion.
	key2 := storetest.NewKey()
	_, err = s.Claim(ctx, storekit.ClaimRequest{Key: key2, Nonce: "n", LeaseTTL: time.Hour, TakeoverAfter: time.Minute})
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, key2, "n", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("1"), TTL: time.Hour}))
	rec, err := s.Get(ctx, key2)
	require.NoError(t, err)
	require.Equal(t, storekit.StatusCompleted, rec.Status)
	refused := false
	for rec, err := range s.Records(ctx) {
		if err == nil {
			t.Errorf("a listing on a bucket with history 5 yielded %s %v", rec.Key, rec.Status)
			continue
		}
		require.ErrorIs(t, err, storekit.ErrInvalidOption)
		require.True(t, strings.Contains(err.Error(), "history of 5"), err.Error())
		refused = true
	}
	require.True(t, refused, "the listing yielded nothing")
	_, err = natsstore.BackgroundPass(ctx, s)
	require.True(t, errors.Is(err, storekit.ErrInvalidOption), "pass: %v", err)
}
