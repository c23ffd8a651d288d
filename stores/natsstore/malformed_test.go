package natsstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/natsstore"
)

// TestMalformedRecordsAreCorrupt: a record with a negative takeover
// threshold, or at the largest attempt, is reported as corrupt by a claim
// and left as it is, never taken over or re-claimed: the same judgement as
// every other store's.
func TestMalformedRecordsAreCorrupt(t *testing.T) {
	_, js := connect(t, testenv.NATSURL(t))
	kv := newBucket(t, js)
	s, err := natsstore.New(kv, natsstore.WithoutCleanup())
	require.NoError(t, err)
	g, err := idem.New[int](s, idem.WithTakeoverAfter(20*time.Millisecond), idem.WithHeartbeat(5*time.Millisecond))
	require.NoError(t, err)
	ctx := ctxT(t)
	now := time.Now().UnixMilli()
	for _, tc := range []struct {
		name                       string
		attempt, takeover, expires int64
	}{
		{"negative takeover_ms on a stale claim", 1, -1, now + time.Hour.Milliseconds()},
		{"largest attempt on a stale claim", math.MaxInt64, 20, now + time.Hour.Milliseconds()},
		{"largest attempt on an expired claim", math.MaxInt64, 20, now - 1},
	} {
		sk, err := guardinfo.StorageKey(g, tc.name)
		require.NoError(t, err)
		v, err := json.Marshal(map[string]any{"v": storekit.RecordVersion, "key": sk, "status": "in_progress",
			"nonce": "owner", "attempt": tc.attempt, "started_at": 1, "heartbeat_at": 1,
			"expires_at": tc.expires, "takeover_ms": tc.takeover})
		require.NoError(t, err)
		_, err = kv.Put(ctx, natsstore.KVKey(sk), v)
		require.NoError(t, err)
		ran := false
		_, err = g.Do(ctx, tc.name, func(context.Context) (int, error) { ran = true; return 1, nil })
		if !errors.Is(err, storekit.ErrCorruptRecord) {
			t.Errorf("%s: Do: %v, want ErrCorruptRecord", tc.name, err)
		}
		if ran {
			t.Errorf("%s: fn ran", tc.name)
		}
		e, err := kv.Get(ctx, natsstore.KVKey(sk))
		require.NoError(t, err)
		require.Equal(t, string(v), string(e.Value()), "%s: the record was written over", tc.name)
	}
}
