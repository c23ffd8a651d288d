package redisstore_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/idem-go/idem/stores/redisstore"
)

// TestHugeRetentionKeepsExpiry: a claim under WithRetention(math.MaxInt64)
// still gets a native expiry (lease plus retention, saturated). The sum
// wrapped negative, and the key was stored without any expiry.
func TestHugeRetentionKeepsExpiry(t *testing.T) {
	c := standalone(t)
	s := newStore(t, c, redisstore.WithRetention(math.MaxInt64))
	ctx := context.Background()
	key := storageKey()
	if _, err := s.Claim(ctx, claimReq(key, "n")); err != nil {
		t.Fatal(err)
	}
	ttl, err := c.PTTL(ctx, s.Key(key)).Result()
	if err != nil {
		t.Fatal(err)
	}
	if ttl < 100*365*24*time.Hour {
		t.Fatalf("PTTL %v, want the saturated lease plus retention", ttl)
	}
}
