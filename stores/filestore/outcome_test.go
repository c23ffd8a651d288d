package filestore_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
)

// A Guard with a 400 ms threshold never takes over the live claim of a Guard
// with a 2 s threshold, however old the owner's heartbeat is by the short
// threshold: staleness is judged by the threshold stored with the claim.
// (With the caller's threshold, the short Guard took over and fn ran twice.)
func TestShortThresholdDoesNotStealLiveClaim(t *testing.T) {
	s, clk := newStore(t)
	long, err := idem.New[int](s, idem.WithTakeoverAfter(2*time.Second), idem.WithHeartbeat(time.Second))
	require.NoError(t, err)
	short, err := idem.New[int](s, idem.WithTakeoverAfter(400*time.Millisecond), idem.WithHeartbeat(100*time.Millisecond))
	require.NoError(t, err)
	var runs atomic.Int32
	_, err = long.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
		runs.Add(1)
		clk.Advance(time.Second) // stale by 400 ms, live by the owner's 2 s
		_, err := short.Do(ctx, "k", func(ctx context.Context) (int, error) { runs.Add(1); return 2, nil })
		if !errors.Is(err, idem.ErrInProgress) {
			t.Errorf("short threshold: %v, want ErrInProgress", err)
		}
		return 1, nil
	})
	require.NoError(t, err)
	assert.Equal(t, int32(1), runs.Load(), "fn ran once")

	// Past the owner's own threshold a dead claim is taken over, by anyone.
	sk, err := guardinfo.StorageKey(short, "dead")
	require.NoError(t, err)
	_, err = s.Claim(context.Background(), storekit.ClaimRequest{Key: sk, Nonce: "dead-owner", LeaseTTL: time.Hour, TakeoverAfter: 2 * time.Second})
	require.NoError(t, err)
	clk.Advance(2 * time.Second)
	v, err := short.Do(context.Background(), "dead", func(ctx context.Context) (int, error) { return 3, nil })
	require.NoError(t, err)
	assert.Equal(t, 3, v)
}

// A failure message the file store could hold anyway is still stored
// sanitised and bounded under Lock, so a record moves between stores.
func TestLockFailureStoredBounded(t *testing.T) {
	s, _ := newStore(t)
	g, err := idem.New[int](s, idem.OnFailure(idem.Lock))
	require.NoError(t, err)
	_, err = g.Do(context.Background(), "k", func(ctx context.Context) (int, error) {
		return 0, errors.New("nul\x00" + strings.Repeat("x", 10000))
	})
	require.Error(t, err)
	_, err = g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 1, nil })
	var se *storekit.RecordedFailure
	require.ErrorAs(t, err, &se)
	assert.NotContains(t, se.Message, "\x00")
	assert.LessOrEqual(t, len(se.Message), 4096)
}
