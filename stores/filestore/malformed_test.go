package filestore_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/filestore"
)

// TestMalformedRecordsAreCorrupt: a record with a negative takeover
// threshold, or at the largest attempt, is reported as corrupt by a claim
// and left as it is, never taken over or re-claimed, as in every other
// store. (A claim of a record at the largest attempt failed to encode the
// record it would write, an attempt that had wrapped negative.)
func TestMalformedRecordsAreCorrupt(t *testing.T) {
	s, err := filestore.New(t.TempDir(), filestore.WithoutCleanup(), filestore.WithoutSync())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g, err := idem.New[int](s, idem.WithTakeoverAfter(20*time.Millisecond), idem.WithHeartbeat(5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
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
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Claim(ctx, storekit.ClaimRequest{Key: sk, Nonce: "owner", LeaseTTL: time.Hour, TakeoverAfter: time.Hour}); err != nil {
			t.Fatal(err)
		}
		v, err := json.Marshal(map[string]any{"v": storekit.RecordVersion, "key": sk, "status": "in_progress",
			"nonce": "owner", "attempt": tc.attempt, "started_at": 1, "heartbeat_at": 1,
			"expires_at": tc.expires, "takeover_ms": tc.takeover})
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filestore.RecordPath(s, sk), v, 0o600); err != nil {
			t.Fatal(err)
		}
		ran := false
		_, err = g.Do(ctx, tc.name, func(context.Context) (int, error) { ran = true; return 1, nil })
		if !errors.Is(err, storekit.ErrCorruptRecord) {
			t.Errorf("%s: Do: %v, want ErrCorruptRecord", tc.name, err)
		}
		if ran {
			t.Errorf("%s: fn ran", tc.name)
		}
		if got, err := os.ReadFile(filestore.RecordPath(s, sk)); err != nil || string(got) != string(v) {
			t.Errorf("%s: the record was written over: %q, %v", tc.name, got, err)
		}
	}
}
