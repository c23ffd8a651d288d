package filestore_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gofrs/flock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/filestore"
	"github.com/idem-go/idem/stores/storetest"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct{ ms atomic.Int64 }

func newClock() *fakeClock {
	c := &fakeClock{}
	c.ms.Store(time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC).UnixMilli())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.UnixMilli(c.ms.Load()) }
func (c *fakeClock) Ms() int64               { return c.ms.Load() }
func (c *fakeClock) Advance(d time.Duration) { c.ms.Add(d.Milliseconds()) }

func newStore(t testing.TB, opts ...filestore.Option) (*filestore.Store, *fakeClock) {
	t.Helper()
	clk := newClock()
	s, err := filestore.New(filepath.Join(t.TempDir(), "store"), append([]filestore.Option{filestore.WithClock(clk.Now)}, opts...)...)
	require.NoError(t, err)
	return s, clk
}

const (
	lease    = time.Minute
	takeover = 10 * time.Second
)

// writeFile writes a file of the store bypassing it, making its leaf
// directory if it is missing.
func writeFile(t testing.TB, p string, content []byte) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
	require.NoError(t, os.WriteFile(p, content, 0o600))
}

// storeFiles returns the names of the files under dir outside .locks, and
// fails the test if one is not in a leaf directory (two levels down).
func storeFiles(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".locks" {
			return filepath.SkipDir
		}
		if !d.IsDir() {
			rel, err := filepath.Rel(dir, p)
			require.NoError(t, err)
			out = append(out, rel)
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

func key(i int) string { return fmt.Sprintf("idem:%064x", i) }

func req(k, nonce string) storekit.ClaimRequest {
	return storekit.ClaimRequest{Key: k, Nonce: nonce, LeaseTTL: lease, TakeoverAfter: takeover}
}

func TestClaimFresh(t *testing.T) {
	s, clk := newStore(t)
	ctx := context.Background()
	k := key(1)
	r := req(k, "n1")
	r.PayloadHash = "ph"
	res, err := s.Claim(ctx, r)
	require.NoError(t, err)
	require.Equal(t, storekit.Claimed, res.Outcome)
	now := clk.Ms()
	assert.Equal(t, &storekit.Record{
		Key: k, Status: storekit.StatusInProgress, PayloadHash: "ph", Nonce: "n1", Attempt: 1,
		StartedAt: now, HeartbeatAt: now, ExpiresAt: now + lease.Milliseconds(),
		TakeoverMs: takeover.Milliseconds(), // the owner's threshold is kept with the claim
	}, res.Record)

	got, err := s.Get(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, res.Record, got)

	// The file is named by the key and nothing else.
	b, err := os.ReadFile(filestore.RecordPath(s, k))
	require.NoError(t, err)
	dec, err := storekit.DecodeRecord(b)
	require.NoError(t, err)
	assert.Equal(t, res.Record, dec)
}

func TestClaimExistingAndRetriedNonce(t *testing.T) {
	s, clk := newStore(t)
	ctx := context.Background()
	k := key(2)
	first, err := s.Claim(ctx, req(k, "n1"))
	require.NoError(t, err)

	clk.Advance(takeover - time.Millisecond)
	res, err := s.Claim(ctx, req(k, "n2"))
	require.NoError(t, err)
	assert.Equal(t, storekit.Existing, res.Outcome)
	assert.Equal(t, first.Record, res.Record, "existing record returned untouched")

	// A claim retried with the nonce that won is Claimed again, unchanged.
	res, err = s.Claim(ctx, req(k, "n1"))
	require.NoError(t, err)
	assert.Equal(t, storekit.Claimed, res.Outcome)
	assert.Equal(t, first.Record, res.Record)
}

func TestTakeoverAndNonceFencing(t *testing.T) {
	s, clk := newStore(t)
	ctx := context.Background()
	k := key(3)
	_, err := s.Claim(ctx, req(k, "old"))
	require.NoError(t, err)

	clk.Advance(takeover)
	res, err := s.Claim(ctx, req(k, "new"))
	require.NoError(t, err)
	require.Equal(t, storekit.TookOver, res.Outcome)
	assert.Equal(t, "new", res.Record.Nonce)
	assert.EqualValues(t, 2, res.Record.Attempt)
	assert.Equal(t, clk.Ms(), res.Record.HeartbeatAt)
	assert.Equal(t, clk.Ms(), res.Record.StartedAt)

	// The stale owner can write nothing.
	require.ErrorIs(t, s.Heartbeat(ctx, k, "old", lease), storekit.ErrLostOwnership)
	require.ErrorIs(t, s.Complete(ctx, k, "old", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`"stale"`), TTL: time.Hour}), storekit.ErrLostOwnership)
	require.ErrorIs(t, s.Release(ctx, k, "old"), storekit.ErrLostOwnership)
	got, err := s.Get(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, res.Record, got)

	// The new owner completes; the stale owner still cannot overwrite.
	require.NoError(t, s.Complete(ctx, k, "new", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`"fresh"`), TTL: time.Hour}))
	require.ErrorIs(t, s.Complete(ctx, k, "old", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`"stale"`), TTL: time.Hour}), storekit.ErrLostOwnership)
	got, err = s.Get(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, `"fresh"`, string(got.Result))
}

func TestNoTakeoverWithDifferentPayload(t *testing.T) {
	s, clk := newStore(t)
	ctx := context.Background()
	k := key(4)
	r := req(k, "n1")
	r.PayloadHash = "a"
	_, err := s.Claim(ctx, r)
	require.NoError(t, err)
	clk.Advance(takeover * 2)
	r2 := req(k, "n2")
	r2.PayloadHash = "b"
	res, err := s.Claim(ctx, r2)
	require.NoError(t, err)
	assert.Equal(t, storekit.Existing, res.Outcome)
	assert.Equal(t, "n1", res.Record.Nonce)
}

func TestExpiry(t *testing.T) {
	s, clk := newStore(t)
	ctx := context.Background()
	k := key(5)
	_, err := s.Claim(ctx, req(k, "n1"))
	require.NoError(t, err)
	clk.Advance(lease)
	_, err = s.Get(ctx, k)
	require.ErrorIs(t, err, storekit.ErrNotFound)

	res, err := s.Claim(ctx, req(k, "n2"))
	require.NoError(t, err)
	assert.Equal(t, storekit.Claimed, res.Outcome)
	assert.EqualValues(t, 2, res.Record.Attempt, "attempt continues across expiry")

	// Completed records expire too.
	require.NoError(t, s.Complete(ctx, k, "n2", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("1"), TTL: time.Hour}))
	clk.Advance(time.Hour - time.Millisecond)
	res, err = s.Claim(ctx, req(k, "n3"))
	require.NoError(t, err)
	assert.Equal(t, storekit.Existing, res.Outcome)
	clk.Advance(time.Millisecond)
	res, err = s.Claim(ctx, req(k, "n3"))
	require.NoError(t, err)
	assert.Equal(t, storekit.Claimed, res.Outcome)
	assert.EqualValues(t, 3, res.Record.Attempt)
}

func TestHeartbeat(t *testing.T) {
	s, clk := newStore(t)
	ctx := context.Background()
	k := key(6)
	_, err := s.Claim(ctx, req(k, "n1"))
	require.NoError(t, err)
	clk.Advance(takeover - time.Second)
	require.NoError(t, s.Heartbeat(ctx, k, "n1", 2*lease))
	got, err := s.Get(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, clk.Ms(), got.HeartbeatAt)
	assert.Equal(t, clk.Ms()+2*lease.Milliseconds(), got.ExpiresAt)

	// The heartbeat kept the claim fresh: no takeover where there would
	// have been one without it.
	clk.Advance(takeover - time.Second)
	res, err := s.Claim(ctx, req(k, "n2"))
	require.NoError(t, err)
	assert.Equal(t, storekit.Existing, res.Outcome)

	require.ErrorIs(t, s.Heartbeat(ctx, k, "other", lease), storekit.ErrLostOwnership)
	require.ErrorIs(t, s.Heartbeat(ctx, key(999), "n1", lease), storekit.ErrLostOwnership, "missing record")
	require.NoError(t, s.Complete(ctx, k, "n1", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Hour}))
	require.ErrorIs(t, s.Heartbeat(ctx, k, "n1", lease), storekit.ErrLostOwnership, "completed record")
}

func TestCompleteAndFail(t *testing.T) {
	s, clk := newStore(t)
	ctx := context.Background()
	k := key(7)
	_, err := s.Claim(ctx, req(k, "n1"))
	require.NoError(t, err)
	clk.Advance(time.Second)
	c := storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`{"id":1}`), TTL: time.Hour}
	require.NoError(t, s.Complete(ctx, k, "n1", c))
	got, err := s.Get(ctx, k)
	require.NoError(t, err)
	assert.Equal(t, storekit.StatusCompleted, got.Status)
	assert.Equal(t, `{"id":1}`, string(got.Result))
	assert.Equal(t, clk.Ms(), got.CompletedAt)
	assert.Equal(t, clk.Ms()+time.Hour.Milliseconds(), got.ExpiresAt)

	// A retried Complete finding its own outcome succeeds.
	require.NoError(t, s.Complete(ctx, k, "n1", c))
	// A replay sees the completed record.
	res, err := s.Claim(ctx, req(k, "n2"))
	require.NoError(t, err)
	assert.Equal(t, storekit.Existing, res.Outcome)
	assert.Equal(t, storekit.StatusCompleted, res.Record.Status)

	k2 := key(8)
	_, err = s.Claim(ctx, req(k2, "m1"))
	require.NoError(t, err)
	se := &storekit.RecordedFailure{Message: "boom", Type: "*errors.errorString"}
	require.NoError(t, s.Complete(ctx, k2, "m1", storekit.Completion{Status: storekit.StatusFailed, Error: se, TTL: time.Hour}))
	got, err = s.Get(ctx, k2)
	require.NoError(t, err)
	assert.Equal(t, storekit.StatusFailed, got.Status)
	assert.Equal(t, se, got.Error)

	require.ErrorIs(t, s.Complete(ctx, key(998), "x", c), storekit.ErrLostOwnership, "missing record")
}

func TestRelease(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	k := key(9)
	_, err := s.Claim(ctx, req(k, "n1"))
	require.NoError(t, err)
	require.ErrorIs(t, s.Release(ctx, k, "n2"), storekit.ErrLostOwnership)
	require.NoError(t, s.Release(ctx, k, "n1"))
	_, err = s.Get(ctx, k)
	require.ErrorIs(t, err, storekit.ErrNotFound)

	res, err := s.Claim(ctx, req(k, "n2"))
	require.NoError(t, err)
	assert.Equal(t, storekit.Claimed, res.Outcome)
	assert.EqualValues(t, 2, res.Record.Attempt, "fencing token stays monotonic across release")

	require.NoError(t, s.Complete(ctx, k, "n2", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Hour}))
	require.ErrorIs(t, s.Release(ctx, k, "n2"), storekit.ErrLostOwnership, "completed record cannot be released")
}

func TestGetAndDelete(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	k := key(10)
	_, err := s.Get(ctx, k)
	require.ErrorIs(t, err, storekit.ErrNotFound)
	require.NoError(t, s.Delete(ctx, k), "deleting a missing record")

	_, err = s.Claim(ctx, req(k, "n1"))
	require.NoError(t, err)
	require.NoError(t, s.Delete(ctx, k))
	_, err = s.Get(ctx, k)
	require.ErrorIs(t, err, storekit.ErrNotFound)
	_, err = os.Stat(filepath.Join(s.Dir(), k))
	require.ErrorIs(t, err, os.ErrNotExist)

	res, err := s.Claim(ctx, req(k, "n2"))
	require.NoError(t, err)
	assert.Equal(t, storekit.Claimed, res.Outcome)
	assert.EqualValues(t, 1, res.Record.Attempt)
}

func TestCorruptRecord(t *testing.T) {
	valid, err := storekit.EncodeRecord(&storekit.Record{Key: key(11), Status: storekit.StatusCompleted, Nonce: "n", Attempt: 1, ExpiresAt: 1 << 60})
	require.NoError(t, err)
	other, err := storekit.EncodeRecord(&storekit.Record{Key: key(12), Status: storekit.StatusCompleted, Nonce: "n", Attempt: 1, ExpiresAt: 1 << 60})
	require.NoError(t, err)
	cases := map[string][]byte{
		"garbage":       []byte("not json at all"),
		"empty":         {},
		"truncated":     valid[:len(valid)/2],
		"wrong version": []byte(strings.Replace(string(valid), `"v":1`, `"v":99`, 1)),
		"invalid":       []byte(`{"v":1,"key":"` + key(11) + `","status":"bogus","nonce":"n","attempt":1}`),
		"other key":     other,
		"binary":        {0, 1, 2, 0xff, 0xfe},
	}
	for name, content := range cases {
		t.Run(name, func(t *testing.T) {
			s, _ := newStore(t)
			ctx := context.Background()
			k := key(11)
			p := filestore.RecordPath(s, k)
			writeFile(t, p, content)

			check := func(op string, err error) {
				t.Helper()
				require.Error(t, err, op)
				require.ErrorIs(t, err, storekit.ErrCorruptRecord, op)
				var ce *storekit.CorruptRecordError
				require.ErrorAs(t, err, &ce, op)
				assert.Equal(t, k, ce.Key, op)
			}
			_, err := s.Claim(ctx, req(k, "n1"))
			check("claim", err)
			_, err = s.Get(ctx, k)
			check("get", err)
			check("heartbeat", s.Heartbeat(ctx, k, "n", lease))
			check("complete", s.Complete(ctx, k, "n", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Hour}))
			check("release", s.Release(ctx, k, "n"))
			n, err := s.Purge(ctx)
			require.NoError(t, err)
			assert.Zero(t, n)

			after, err := os.ReadFile(p)
			require.NoError(t, err)
			assert.Equal(t, content, after, "nothing overwrote the corrupt record")

			require.NoError(t, s.Delete(ctx, k))
			res, err := s.Claim(ctx, req(k, "n1"))
			require.NoError(t, err)
			assert.Equal(t, storekit.Claimed, res.Outcome)
		})
	}
}

func TestInvalidKeys(t *testing.T) {
	parent := t.TempDir()
	dir := filepath.Join(parent, "store")
	s, err := filestore.New(dir)
	require.NoError(t, err)
	ctx := context.Background()
	bad := []string{
		"", ".", "..", "../x", "../../etc/passwd", "/etc/passwd", "a/b", `a\b`, "x\x00y", "\x00",
		".hidden", ".locks", ".tmp-x-1", "sp ace", "tab\t", "new\nline", "ünïcode", "a*b", "a?b", "%2e%2e",
		strings.Repeat("a", filestore.MaxKeyLen+1),
	}
	for _, k := range bad {
		t.Run(fmt.Sprintf("%q", k), func(t *testing.T) {
			check := func(op string, err error) {
				t.Helper()
				require.ErrorIs(t, err, storekit.ErrInvalidKey, op)
				var ke *storekit.KeyError
				require.ErrorAs(t, err, &ke, op)
			}
			check("validate", filestore.ValidateKey(k))
			_, err := s.Claim(ctx, req(k, "n"))
			check("claim", err)
			_, err = s.Get(ctx, k)
			check("get", err)
			check("heartbeat", s.Heartbeat(ctx, k, "n", lease))
			check("complete", s.Complete(ctx, k, "n", storekit.Completion{Status: storekit.StatusCompleted}))
			check("release", s.Release(ctx, k, "n"))
			check("delete", s.Delete(ctx, k))
			_, _, err = s.LocalWatch().Watch(ctx, k)
			check("watch", err)
		})
	}
	// Nothing was created outside the store directory, and inside it only
	// the lock directory.
	entries, err := os.ReadDir(parent)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	entries, err = os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 1)
	assert.Equal(t, ".locks", entries[0].Name())
}

func TestValidKeys(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	for _, k := range []string{key(0), "a", "A-Z_a-z.0-9:x", "x..y", strings.Repeat("k", filestore.MaxKeyLen)} {
		require.NoError(t, filestore.ValidateKey(k), k)
		res, err := s.Claim(ctx, req(k, "n"))
		require.NoError(t, err, k)
		assert.Equal(t, storekit.Claimed, res.Outcome, k)
		_, err = os.Stat(filestore.RecordPath(s, k))
		require.NoError(t, err, k)
	}
}

func TestPermissions(t *testing.T) {
	ctx := context.Background()
	t.Run("created 0700 with 0600 files", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "a", "b")
		s, err := filestore.New(dir)
		require.NoError(t, err)
		_, err = s.Claim(ctx, req(key(1), "n"))
		require.NoError(t, err)
		mode := func(p string) os.FileMode {
			fi, err := os.Stat(p)
			require.NoError(t, err)
			return fi.Mode().Perm()
		}
		assert.Equal(t, os.FileMode(0o700), mode(dir))
		assert.Equal(t, os.FileMode(0o700), mode(filepath.Join(dir, ".locks")))
		assert.Equal(t, os.FileMode(0o600), mode(filestore.RecordPath(s, key(1))))
		assert.Equal(t, os.FileMode(0o700), mode(filepath.Dir(filestore.RecordPath(s, key(1)))))
		assert.Equal(t, os.FileMode(0o700), mode(filepath.Dir(filepath.Dir(filestore.RecordPath(s, key(1))))))
		assert.Equal(t, os.FileMode(0o600), mode(filestore.StripePath(s, key(1))))
	})
	t.Run("group or world writable refused", func(t *testing.T) {
		for _, m := range []os.FileMode{0o777, 0o770, 0o702, 0o1777} {
			dir := filepath.Join(t.TempDir(), "d")
			require.NoError(t, os.Mkdir(dir, 0o700))
			require.NoError(t, os.Chmod(dir, m))
			_, err := filestore.New(dir)
			require.ErrorIs(t, err, filestore.ErrUnsafeDir, "%v", m)
			var ue *filestore.UnsafeDirError
			require.ErrorAs(t, err, &ue)
			assert.Equal(t, dir, ue.Path)
			fi, err := os.Stat(dir)
			require.NoError(t, err)
			assert.Equal(t, m&os.ModePerm, fi.Mode().Perm(), "mode left alone")
		}
	})
	t.Run("writable lock directory refused", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "d")
		_, err := filestore.New(dir)
		require.NoError(t, err)
		require.NoError(t, os.Chmod(filepath.Join(dir, ".locks"), 0o777))
		_, err = filestore.New(dir)
		require.ErrorIs(t, err, filestore.ErrUnsafeDir)
	})
	t.Run("readable directory accepted", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "d")
		require.NoError(t, os.Mkdir(dir, 0o755))
		require.NoError(t, os.Chmod(dir, 0o755))
		_, err := filestore.New(dir)
		require.NoError(t, err)
	})
	t.Run("not a directory", func(t *testing.T) {
		p := filepath.Join(t.TempDir(), "file")
		require.NoError(t, os.WriteFile(p, nil, 0o600))
		_, err := filestore.New(p)
		require.Error(t, err)
	})
}

func TestOptions(t *testing.T) {
	dir := t.TempDir()
	for name, opts := range map[string][]filestore.Option{
		"nil clock":      {filestore.WithClock(nil)},
		"negative grace": {filestore.WithRetention(-time.Second)},
		"nil option":     {nil},
		"nil logger":     {filestore.WithLogger(nil)},
	} {
		_, err := filestore.New(dir, opts...)
		require.ErrorIs(t, err, storekit.ErrInvalidOption, name)
	}
	_, err := filestore.New("")
	require.ErrorIs(t, err, storekit.ErrInvalidOption)
	_, err = filestore.New("", filestore.WithClock(nil), nil, filestore.WithRetention(-time.Second))
	storetest.CheckOptionErrors(t, err, "filestore.New", "filestore.WithClock", "filestore.New", "filestore.WithRetention")
	assert.Contains(t, err.Error(), "idem: filestore.WithRetention: retention must not be negative, got -1s")

	s, err := filestore.New(filepath.Join(dir, "nosync"), filestore.WithoutSync())
	require.NoError(t, err)
	res, err := s.Claim(context.Background(), req(key(1), "n"))
	require.NoError(t, err)
	assert.Equal(t, storekit.Claimed, res.Outcome)
}

func TestContext(t *testing.T) {
	s, _ := newStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := s.Claim(ctx, req(key(1), "n"))
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, s.Delete(ctx, key(1)), context.Canceled)
	_, err = s.Purge(ctx)
	require.ErrorIs(t, err, context.Canceled)
}

// TestLockWaitHonoursContext holds a key's lock file from outside the store
// (another open file description, as another process would) and checks that
// a writer waits for it, gives up when its context ends, and works again
// once the lock is free.
func TestLockWaitHonoursContext(t *testing.T) {
	s, _ := newStore(t)
	k := key(1)
	other := flock.New(filestore.StripePath(s, k))
	require.NoError(t, other.Lock())

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := s.Claim(ctx, req(k, "n1"))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = s.Get(context.Background(), k)
	require.ErrorIs(t, err, storekit.ErrNotFound, "nothing written without the lock")

	// A waiter blocked in the kernel proceeds when the lock is released.
	done := make(chan error, 1)
	go func() {
		_, err := s.Claim(context.Background(), req(k, "n2"))
		done <- err
	}()
	select {
	case err := <-done:
		t.Fatalf("claim returned while the lock was held: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	require.NoError(t, other.Unlock())
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("claim did not proceed after the lock was released")
	}
	got, err := s.Get(context.Background(), k)
	require.NoError(t, err)
	assert.Equal(t, "n2", got.Nonce)
}

func TestPurge(t *testing.T) {
	s, clk := newStore(t, filestore.WithRetention(0))
	ctx := context.Background()
	done := storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Minute}

	_, err := s.Claim(ctx, req(key(1), "live"))
	require.NoError(t, err)
	_, err = s.Claim(ctx, req(key(2), "released"))
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, key(2), "released"))
	_, err = s.Claim(ctx, req(key(3), "done"))
	require.NoError(t, err)
	require.NoError(t, s.Complete(ctx, key(3), "done", done))
	writeFile(t, filestore.RecordPath(s, key(4)), []byte("junk"))
	// Temporary files left by a crashed write, and files that are not ours.
	leaf := func(k string) string { return filepath.Dir(filestore.RecordPath(s, k)) }
	tmp1 := filepath.Join(leaf(key(1)), ".tmp-"+key(1)+"-12345")
	writeFile(t, tmp1, []byte("half"))
	tmp9 := filepath.Join(leaf(key(9)), ".tmp-"+key(9)+"-1")
	writeFile(t, tmp9, []byte("half"))
	writeFile(t, filepath.Join(s.Dir(), ".keepme"), []byte("x"))
	writeFile(t, filepath.Join(leaf(key(1)), ".keepme"), []byte("x"))
	writeFile(t, filepath.Join(s.Dir(), "subdir", "x"), []byte("x"))
	writeFile(t, filepath.Join(leaf(key(1)), key(5)), []byte("a record in the wrong leaf"))
	rel := func(p string) string {
		r, err := filepath.Rel(s.Dir(), p)
		require.NoError(t, err)
		return r
	}
	others := []string{".keepme", rel(filepath.Join(leaf(key(1)), ".keepme")), filepath.Join("subdir", "x"), rel(filepath.Join(leaf(key(1)), key(5)))}

	n, err := s.Purge(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "only the released record has expired")
	recs := func(ks ...string) []string {
		out := slices.Clone(others)
		for _, k := range ks {
			out = append(out, rel(filestore.RecordPath(s, k)))
		}
		return out
	}
	assert.ElementsMatch(t, recs(key(1), key(3), key(4)), storeFiles(t, s.Dir()))

	clk.Advance(time.Minute)
	n, err = s.Purge(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, n, "live claim and completion expired; the corrupt record stays")
	assert.ElementsMatch(t, recs(key(4)), storeFiles(t, s.Dir()))
	n, err = s.Purge(ctx)
	require.NoError(t, err)
	assert.Zero(t, n)
}

func TestPurgeGrace(t *testing.T) {
	s, clk := newStore(t, filestore.WithRetention(time.Hour))
	ctx := context.Background()
	_, err := s.Claim(ctx, req(key(1), "n"))
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, key(1), "n"))
	clk.Advance(time.Hour - time.Millisecond)
	n, err := s.Purge(ctx)
	require.NoError(t, err)
	assert.Zero(t, n)
	res, err := s.Claim(ctx, req(key(2), "n"))
	require.NoError(t, err)
	assert.EqualValues(t, 1, res.Record.Attempt)
	clk.Advance(time.Millisecond)
	n, err = s.Purge(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
}

// TestPurgeRacesClaims runs Purge in a loop while other goroutines reclaim
// expired keys: a record claimed after Purge first looked at the key must
// never be removed (Purge decides again under the key's lock). Purge runs
// through a second Store on the directory, so only the lock files (not an
// in-process mutex) keep the two apart, as between processes.
func TestPurgeRacesClaims(t *testing.T) {
	s, clk := newStore(t, filestore.WithoutSync())
	purger, err := filestore.New(s.Dir(), filestore.WithoutSync(), filestore.WithClock(clk.Now))
	require.NoError(t, err)
	ctx := context.Background()
	const keys = 200
	for i := range keys {
		_, err := s.Claim(ctx, req(key(i), "first"))
		require.NoError(t, err)
		require.NoError(t, s.Release(ctx, key(i), "first"))
	}
	stop := make(chan struct{})
	var purged atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			n, err := purger.Purge(ctx)
			assert.NoError(t, err)
			purged.Add(int64(n))
		}
	}()
	var claims sync.WaitGroup
	for w := range 4 {
		claims.Add(1)
		go func() {
			defer claims.Done()
			for i := w; i < keys; i += 4 {
				res, err := s.Claim(ctx, req(key(i), "second"))
				if !assert.NoError(t, err) {
					return
				}
				assert.Equal(t, storekit.Claimed, res.Outcome)
				_, err = s.Get(ctx, key(i))
				assert.NoError(t, err, "a live claim was purged: %s", key(i))
			}
		}()
	}
	claims.Wait()
	close(stop)
	wg.Wait()
	for i := range keys {
		got, err := s.Get(ctx, key(i))
		require.NoError(t, err)
		assert.Equal(t, "second", got.Nonce)
	}
	t.Logf("purged %d released records while %d were reclaimed", purged.Load(), keys)
}

// TestConcurrentClaimOneKey: 64 goroutines claim one key at once; exactly
// one wins and every other sees the winner's record.
func TestConcurrentClaimOneKey(t *testing.T) {
	for round := range 5 {
		s, _ := newStore(t)
		ctx := context.Background()
		k := key(round)
		const n = 64
		results := make([]storekit.ClaimResult, n)
		errs := make([]error, n)
		start := make(chan struct{})
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				results[i], errs[i] = s.Claim(ctx, req(k, fmt.Sprintf("nonce-%d", i)))
			}()
		}
		close(start)
		wg.Wait()
		winners := 0
		var winner string
		for i := range n {
			require.NoError(t, errs[i])
			if results[i].Outcome == storekit.Claimed {
				winners++
				winner = results[i].Record.Nonce
			} else {
				require.Equal(t, storekit.Existing, results[i].Outcome)
			}
		}
		require.Equal(t, 1, winners)
		for i := range n {
			assert.Equal(t, winner, results[i].Record.Nonce)
		}
	}
}

// TestTwoStoresOneDirectory: two Store values on one directory in one
// process exclude each other through the lock files alone (they share no
// in-process mutex).
func TestTwoStoresOneDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shared")
	a, err := filestore.New(dir, filestore.WithoutSync())
	require.NoError(t, err)
	b, err := filestore.New(dir, filestore.WithoutSync())
	require.NoError(t, err)
	ctx := context.Background()
	const keys = 100
	var wins [keys]atomic.Int32
	var wg sync.WaitGroup
	for g := range 32 {
		s := a
		if g%2 == 1 {
			s = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range keys {
				res, err := s.Claim(ctx, req(key(i), fmt.Sprintf("g%d", g)))
				if !assert.NoError(t, err) {
					return
				}
				if res.Outcome == storekit.Claimed {
					wins[i].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	for i := range keys {
		assert.EqualValues(t, 1, wins[i].Load(), key(i))
	}
	// Every write renamed its temporary file away.
	files := storeFiles(t, dir)
	require.Len(t, files, keys)
	for _, f := range files {
		assert.False(t, strings.HasPrefix(filepath.Base(f), ".tmp-"), f)
	}
}

func TestWatch(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "w")
	plain, err := filestore.New(dir)
	require.NoError(t, err)
	s := plain.LocalWatch()
	s2, err := filestore.New(dir)
	require.NoError(t, err)
	ctx := context.Background()
	k := key(1)
	_, isWatcher := any(plain).(storekit.Watcher)
	require.False(t, isWatcher, "a plain Store is no Watcher")

	closed := func(ch <-chan struct{}) bool {
		select {
		case <-ch:
			return true
		case <-time.After(20 * time.Millisecond):
			return false
		}
	}

	ch, stop, err := s.Watch(ctx, k)
	require.NoError(t, err)
	defer stop()
	other, stopOther, err := s.Watch(ctx, key(2))
	require.NoError(t, err)
	defer stopOther()
	_, err = s2.Claim(ctx, req(k, "n1"))
	require.NoError(t, err)
	assert.True(t, closed(ch), "claim through another Store on the directory wakes the watcher")
	assert.False(t, closed(other), "other keys are not woken")

	ch, stop2, err := s.Watch(ctx, k)
	require.NoError(t, err)
	defer stop2()
	require.NoError(t, s.Heartbeat(ctx, k, "n1", lease))
	assert.False(t, closed(ch), "heartbeat does not wake")
	res, err := s.Claim(ctx, req(k, "n2"))
	require.NoError(t, err)
	require.Equal(t, storekit.Existing, res.Outcome)
	assert.False(t, closed(ch), "an existing claim changes nothing")
	require.NoError(t, s.Complete(ctx, k, "n1", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Hour}))
	assert.True(t, closed(ch), "completion wakes")

	ch, stop3, err := s.Watch(ctx, k)
	require.NoError(t, err)
	stop3()
	require.NoError(t, s.Delete(ctx, k))
	assert.False(t, closed(ch), "a stopped watch is not woken")

	wctx, cancel := context.WithCancel(ctx)
	_, stop4, err := s.Watch(wctx, k)
	require.NoError(t, err)
	cancel()
	stop4() // idempotent after the context removed it
	stop4()

	_, _, err = s.Watch(wctx, k)
	require.ErrorIs(t, err, context.Canceled)
	var _ storekit.Watcher = s
	require.False(t, errors.Is(err, storekit.ErrInvalidKey))
}

// TestInvalidRequests: calls no Guard makes are refused with storekit's
// typed errors, as by every store on storekit.Locked, and change nothing.
// (Before, a claim with a zero takeover threshold was written, and one
// without a nonce got an untyped error.)
func TestInvalidRequests(t *testing.T) {
	s, _ := newStore(t)
	ctx := context.Background()
	key := storetest.NewKey()
	for name, r := range map[string]storekit.ClaimRequest{
		"no nonce":           {Key: key, LeaseTTL: lease, TakeoverAfter: takeover},
		"zero threshold":     {Key: key, Nonce: "n", LeaseTTL: lease},
		"sub-ms lease":       {Key: key, Nonce: "n", LeaseTTL: time.Microsecond, TakeoverAfter: takeover},
		"negative threshold": {Key: key, Nonce: "n", LeaseTTL: lease, TakeoverAfter: -time.Second},
	} {
		_, err := s.Claim(ctx, r)
		require.ErrorIs(t, err, storekit.ErrInvalidRequest, name)
	}
	_, err := s.Get(ctx, key)
	require.ErrorIs(t, err, storekit.ErrNotFound, "a refused claim wrote nothing")
	_, err = s.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: "n", LeaseTTL: lease, TakeoverAfter: takeover})
	require.NoError(t, err)
	require.ErrorIs(t, s.Complete(ctx, key, "n", storekit.Completion{Status: "done", TTL: time.Hour}), storekit.ErrInvalidRequest)
	require.ErrorIs(t, s.Complete(ctx, key, "n", storekit.Completion{Status: storekit.StatusFailed, TTL: time.Hour}), storekit.ErrInvalidRequest)
	require.ErrorIs(t, s.Heartbeat(ctx, key, "", lease), storekit.ErrLostOwnership)
	require.ErrorIs(t, s.Release(ctx, key, ""), storekit.ErrLostOwnership)
}
