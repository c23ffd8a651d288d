package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) idem.Store { return memstore.New() })
}

// TestBoundedMemory writes many distinct short-lived keys and checks that
// expired records are swept as claims go on, without calling Sweep.
func TestBoundedMemory(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	s := memstore.New(memstore.WithClock(clock), memstore.WithGrace(0))
	ctx := context.Background()
	const n = 200_000
	peak := 0
	for i := 0; i < n; i++ {
		key, nonce := storetest.NewKey(), storetest.NewNonce()
		_, err := s.Claim(ctx, idem.ClaimRequest{Key: key, Nonce: nonce, LeaseTTL: time.Second, TakeoverAfter: time.Second})
		require.NoError(t, err)
		require.NoError(t, s.Complete(ctx, key, nonce, idem.Completion{Status: idem.StatusCompleted, Result: []byte(`1`), TTL: time.Second}))
		now = now.Add(time.Millisecond) // 1000 live records at any time
		peak = max(peak, s.Len())
	}
	assert.Less(t, peak, 3000, "live records are ~1000; expired ones must be swept")
	now = now.Add(time.Hour)
	s.Sweep()
	assert.Equal(t, 0, s.Len())
}

func TestGraceKeepsAttempts(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := memstore.New(memstore.WithClock(func() time.Time { return now }))
	ctx := context.Background()
	key := storetest.NewKey()
	n1 := storetest.NewNonce()
	_, err := s.Claim(ctx, idem.ClaimRequest{Key: key, Nonce: n1, LeaseTTL: time.Second, TakeoverAfter: time.Second})
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, key, n1))
	now = now.Add(30 * time.Second)
	res, err := s.Claim(ctx, idem.ClaimRequest{Key: key, Nonce: storetest.NewNonce(), LeaseTTL: time.Second, TakeoverAfter: time.Second})
	require.NoError(t, err)
	assert.Equal(t, int64(2), res.Record.Attempt)
	now = now.Add(2 * memstore.DefaultGrace)
	assert.Equal(t, 1, s.Sweep())
}
