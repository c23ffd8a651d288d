package filestore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/stores/filestore"
)

// childGuardHoldDefault: one g.Do on a Guard with the default options (a
// 30s takeover threshold) whose fn prints its fencing token and holds the
// claim until the process is killed.
func childGuardHoldDefault(out *childOut) error {
	s, err := filestore.New(os.Getenv("IDEM_FS_DIR"))
	if err != nil {
		return err
	}
	g, err := idem.New[string](s)
	if err != nil {
		return err
	}
	_, err = g.Do(context.Background(), os.Getenv("IDEM_FS_KEY"), func(ctx context.Context) (string, error) {
		tok, _ := idem.FencingToken(ctx)
		out.printf("claimed %d", tok)
		select {}
	})
	return err
}

// TestDeadOwnerTakenOverAtOnce: a process that holds a claim is never
// taken over while it lives, running or paused (SIGSTOP), however long;
// once it is killed (SIGKILL), the next call takes its claim over at once,
// not after the 30s takeover threshold, and runs fn with fencing token 2.
func TestDeadOwnerTakenOverAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := filepath.Join(t.TempDir(), "store")
	s, err := filestore.New(dir)
	require.NoError(t, err)
	g, err := idem.New[string](s) // defaults: takeover after 30s
	require.NoError(t, err)
	const k = "dead-owner"
	c := startChild(t, "guard-hold-default", "IDEM_FS_DIR="+dir, "IDEM_FS_KEY="+k)
	require.Equal(t, "claimed 1", c.expect(t, "claimed", 60*time.Second))
	ran := false
	fn := func(ctx context.Context) (string, error) {
		ran = true
		tok, _ := idem.FencingToken(ctx)
		require.EqualValues(t, 2, tok)
		return "parent", nil
	}

	_, err = g.Do(context.Background(), k, fn)
	require.ErrorIs(t, err, idem.ErrInProgress, "a live owner is never taken over")
	sk, err := guardinfo.StorageKey(g, k)
	require.NoError(t, err)
	stopOutsideLock(t, c, filestore.StripePath(s, sk))
	time.Sleep(200 * time.Millisecond)
	_, err = g.Do(context.Background(), k, fn)
	require.ErrorIs(t, err, idem.ErrInProgress, "a paused owner is alive: never taken over before the threshold")
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGCONT))
	require.False(t, ran)

	require.NoError(t, c.cmd.Process.Signal(syscall.SIGKILL))
	<-c.done
	killed := time.Now()
	for {
		v, err := g.Do(context.Background(), k, fn)
		if err == nil {
			require.Equal(t, "parent", v)
			break
		}
		require.True(t, errors.Is(err, idem.ErrInProgress), "retry: %v", err)
		require.Less(t, time.Since(killed), 10*time.Second, "the dead owner's claim is still in the way: the takeover waited for the threshold")
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("a caller retrying every 100ms ran fn %v after the owner was killed (takeover threshold 30s)", time.Since(killed))
	require.True(t, ran)
}
