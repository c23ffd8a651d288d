package redisstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/redisstore"
)

// TestLargestAttemptIsCorrupt: a record whose attempt is the largest the
// record's fixed-width field holds (13 digits) is corrupt, as a record at
// math.MaxInt64 is in the other stores: a claim reports it and never
// takes it over or re-claims it, leaving it as it is. (The claim script
// added one and wrote a 14-digit attempt that broke the record's header.)
func TestLargestAttemptIsCorrupt(t *testing.T) {
	for _, kind := range []string{"standalone", "cluster"} {
		t.Run(kind, func(t *testing.T) {
			c := dial(t, kind)
			s := newStore(t, c)
			g, err := idem.New[int](s, idem.WithTakeoverAfter(20*time.Millisecond), idem.WithHeartbeat(5*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			now := time.Now().UnixMilli()
			for _, tc := range []struct {
				name      string
				expiresAt int64
			}{
				{"stale claim", now + time.Hour.Milliseconds()},
				{"expired claim", now - 1},
			} {
				sk, err := guardinfo.StorageKey(g, tc.name)
				if err != nil {
					t.Fatal(err)
				}
				v, err := redisstore.Encode(&storekit.Record{Key: sk, Status: storekit.StatusInProgress, Nonce: "owner",
					Attempt: 9999999999999, StartedAt: 1, HeartbeatAt: 1, ExpiresAt: tc.expiresAt, TakeoverMs: 20})
				if err != nil {
					t.Fatal(err)
				}
				if err := c.Set(ctx, s.Key(sk), v, time.Hour).Err(); err != nil {
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
				if _, err := s.Get(ctx, sk); !errors.Is(err, storekit.ErrCorruptRecord) {
					t.Errorf("%s: Get: %v, want ErrCorruptRecord", tc.name, err)
				}
				if got, err := c.Get(ctx, s.Key(sk)).Result(); err != nil || got != v {
					t.Errorf("%s: the record was written over: %q, %v", tc.name, got, err)
				}
			}
		})
	}
}
