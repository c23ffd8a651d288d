package sqlstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/sqlstore"
)

// TestSkewedProcessClocks: two Guards, each over its own Store on one
// table, whose process clocks differ by twice the takeover threshold
// (WithProcessClock; against the caller-clock store that was WithClock).
// The store decides with the database's clock, so:
//   - the Guard whose clock is ahead does not take over the other's live,
//     heartbeated claim (fn runs once), and replays its result;
//   - a claim released by the Guard whose clock is ahead is free at once for
//     the Guard whose clock is behind.
func TestSkewedProcessClocks(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		const takeover = time.Second
		skew := 2 * takeover
		e := newEnv(t, d)
		behind := e.store
		ahead, err := sqlstore.New(e.db, d, sqlstore.WithTable(e.table),
			sqlstore.WithProcessClock(func() time.Time { return time.Now().Add(skew) }))
		require.NoError(t, err)
		t.Cleanup(func() { _ = ahead.Close() })
		opts := []idem.Option{idem.WithTakeoverAfter(takeover), idem.WithHeartbeat(takeover / 5)}
		gBehind := newGuard[string](t, behind, opts...)
		gAhead := newGuard[string](t, ahead, opts...)
		ctx := ctxT(t)

		// Live claim by the Guard behind; the Guard ahead tries for a while.
		var runs atomic.Int32
		started, release := make(chan struct{}), make(chan struct{})
		done := make(chan error, 1)
		go func() {
			_, err := gBehind.Do(ctx, "live", func(context.Context) (string, error) {
				runs.Add(1)
				close(started)
				<-release
				return "owner", nil
			})
			done <- err
		}()
		<-started
		for range 5 {
			_, err := gAhead.Do(ctx, "live", func(context.Context) (string, error) {
				runs.Add(1)
				return "thief", nil
			})
			assert.ErrorIs(t, err, idem.ErrInProgress, "the live claim is not taken over")
			time.Sleep(takeover / 4)
		}
		close(release)
		require.NoError(t, <-done)
		v, err := gAhead.Do(ctx, "live", func(context.Context) (string, error) {
			runs.Add(1)
			return "thief", nil
		})
		require.NoError(t, err)
		assert.Equal(t, "owner", v)
		assert.Equal(t, int32(1), runs.Load(), "fn runs once")

		// Released by the Guard ahead (Unlock): free for the Guard behind.
		_, err = gAhead.Do(ctx, "released", func(context.Context) (string, error) {
			return "", errors.New("boom")
		})
		require.Error(t, err)
		v, err = gBehind.Do(ctx, "released", func(context.Context) (string, error) { return "again", nil })
		require.NoError(t, err, "a released claim is free at once")
		assert.Equal(t, "again", v)
	})
}
