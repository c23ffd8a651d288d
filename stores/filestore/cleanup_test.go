package filestore_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/gofrs/flock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/stores/filestore"
	"github.com/idem-go/idem/stores/storetest"
)

// released claims and releases keys 0..n-1, so each record has expired
// at once (ExpiresAt = now) and goes as soon as the retention has passed.
func released(t *testing.T, s *filestore.Store, n int, nonce string) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		_, err := s.Claim(ctx, req(key(i), nonce))
		require.NoError(t, err)
		require.NoError(t, s.Release(ctx, key(i), nonce))
	}
}

func countRecords(t *testing.T, s *filestore.Store, n int) int {
	t.Helper()
	c := 0
	for i := range n {
		if _, err := os.Lstat(filestore.RecordPath(s, key(i))); err == nil {
			c++
		}
	}
	return c
}

// TestCleanupRemovesExpired: an open store removes expired records by
// itself, without Purge being called.
func TestCleanupRemovesExpired(t *testing.T) {
	s, clk := newStore(t, filestore.WithoutSync(), filestore.WithRetention(time.Minute), filestore.WithCleanup(10*time.Millisecond))
	t.Cleanup(func() { _ = s.Close() })
	released(t, s, 50, "a")
	_, err := s.Claim(context.Background(), req(key(99), "live"))
	require.NoError(t, err)
	require.NoError(t, s.Complete(context.Background(), key(99), "live", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Hour}))
	require.Equal(t, 50, countRecords(t, s, 50))
	clk.Advance(30 * time.Second)
	// Passes run, but within the retention nothing goes.
	require.Eventually(t, func() bool { ran, _ := filestore.CleanPasses(s); return ran >= 3 }, 10*time.Second, time.Millisecond)
	require.Equal(t, 50, countRecords(t, s, 50))

	clk.Advance(31 * time.Second)
	require.Eventually(t, func() bool { return countRecords(t, s, 50) == 0 }, 10*time.Second, time.Millisecond)
	got, err := s.Get(context.Background(), key(99))
	require.NoError(t, err)
	require.NotNil(t, got, "the live record stays")
	assert.Equal(t, "live", got.Nonce)
}

// TestPassOpensNoLiveRecord: a pass over live records reads none of them;
// it opens only the files whose modification time says they expired.
func TestPassOpensNoLiveRecord(t *testing.T) {
	s, clk := newStore(t, filestore.WithoutSync(), filestore.WithRetention(0), filestore.WithoutCleanup())
	ctx := context.Background()
	done := storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`1`), TTL: time.Hour}
	const live = 300
	for i := range live {
		_, err := s.Claim(ctx, req(key(i), "n"))
		require.NoError(t, err)
		if i%2 == 0 {
			require.NoError(t, s.Complete(ctx, key(i), "n", done))
		}
	}
	before := filestore.RecordReads(s)
	n, err := s.Purge(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	assert.Zero(t, filestore.RecordReads(s)-before, "a pass with nothing expired opened records")

	// One expired record: the pass opens it and nothing else.
	_, err = s.Claim(ctx, req(key(live), "n"))
	require.NoError(t, err)
	require.NoError(t, s.Release(ctx, key(live), "n"))
	clk.Advance(time.Millisecond)
	before = filestore.RecordReads(s)
	n, err = s.Purge(ctx)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
	assert.EqualValues(t, 1, filestore.RecordReads(s)-before, "the pass opened more than the expired record")

	// The in-progress claims expire with their lease: all are opened and go.
	clk.Advance(lease)
	n, err = s.Purge(ctx)
	require.NoError(t, err)
	assert.Equal(t, live/2, n)
}

// TestPurgeNeverRemovesNewClaim: a claim racing the clean-up on a key
// whose record has expired always wins. Round after round, every key's
// record is expired while claims and passes run at once; each claim that
// was granted must find its record afterwards. A pass that deleted by its
// first look (the file's modification time) instead of reading the record
// again under the key's lock removes granted claims here.
func TestPurgeNeverRemovesNewClaim(t *testing.T) {
	s, _ := newStore(t, filestore.WithoutSync(), filestore.WithRetention(0), filestore.WithoutCleanup())
	ctx := context.Background()
	const keys, rounds = 40, 20
	released(t, s, keys, "r0")
	var purged int
	for round := 1; round <= rounds; round++ {
		nonce := fmt.Sprintf("r%d", round)
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			for range 3 {
				n, err := s.Purge(ctx)
				assert.NoError(t, err)
				purged += n
			}
		})
		for w := range 2 {
			wg.Go(func() {
				<-start
				for i := w; i < keys; i += 2 {
					res, err := s.Claim(ctx, req(key(i), nonce))
					if assert.NoError(t, err) {
						assert.Equal(t, storekit.Claimed, res.Outcome)
					}
				}
			})
		}
		close(start)
		wg.Wait()
		for i := range keys {
			got, err := s.Get(ctx, key(i))
			if errors.Is(err, storekit.ErrNotFound) {
				t.Fatalf("round %d: the granted claim of %s was removed", round, key(i))
			}
			require.NoError(t, err)
			require.Equal(t, nonce, got.Nonce, "round %d", round)
			require.NoError(t, s.Release(ctx, key(i), nonce))
		}
	}
	t.Logf("%d rounds: %d expired records removed beside %d granted claims, none of them lost", rounds, purged, rounds*keys)
}

// TestCleanupOneProcessAtATime: a pass that finds the directory's clean-up
// lock held (by another process, here by the test) is skipped.
func TestCleanupOneProcessAtATime(t *testing.T) {
	s, clk := newStore(t, filestore.WithoutSync(), filestore.WithRetention(0), filestore.WithCleanup(5*time.Millisecond))
	t.Cleanup(func() { _ = s.Close() })
	other := flock.New(filestore.CleanLockPath(s))
	ok, err := other.TryLock()
	require.NoError(t, err)
	require.True(t, ok)
	released(t, s, 20, "a")
	clk.Advance(time.Second)
	require.Eventually(t, func() bool { _, skipped := filestore.CleanPasses(s); return skipped >= 3 }, 10*time.Second, time.Millisecond)
	ran, _ := filestore.CleanPasses(s)
	assert.Zero(t, ran, "a pass ran while another held the clean-up lock")
	assert.Equal(t, 20, countRecords(t, s, 20))

	require.NoError(t, other.Unlock())
	require.Eventually(t, func() bool { return countRecords(t, s, 20) == 0 }, 10*time.Second, time.Millisecond)
}

// TestWithoutCleanupAndClose: WithoutCleanup runs no pass, Close stops
// the passes (and the store stays usable); a store with a short interval
// beside them is the clock.
func TestWithoutCleanupAndClose(t *testing.T) {
	clk := newClock()
	dir := t.TempDir()
	open := func(name string, opts ...filestore.Option) *filestore.Store {
		s, err := filestore.New(filepath.Join(dir, name), append([]filestore.Option{filestore.WithoutSync(), filestore.WithRetention(0), filestore.WithClock(clk.Now)}, opts...)...)
		require.NoError(t, err)
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
	ticker := open("ticker", filestore.WithCleanup(time.Millisecond))
	none := open("none", filestore.WithCleanup(time.Millisecond), filestore.WithoutCleanup())
	closed := open("closed", filestore.WithCleanup(time.Millisecond))
	released(t, none, 10, "a")
	require.Eventually(t, func() bool { ran, _ := filestore.CleanPasses(closed); return ran >= 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, closed.Close())
	require.NoError(t, closed.Close(), "a second Close")
	closedRan, _ := filestore.CleanPasses(closed)
	released(t, closed, 10, "a")
	clk.Advance(time.Second)

	ran0, _ := filestore.CleanPasses(ticker)
	require.Eventually(t, func() bool { ran, _ := filestore.CleanPasses(ticker); return ran >= ran0+20 }, 10*time.Second, time.Millisecond)
	ran, skipped := filestore.CleanPasses(none)
	assert.Zero(t, ran+skipped, "WithoutCleanup ran passes")
	assert.Equal(t, 10, countRecords(t, none, 10))
	ran, skipped = filestore.CleanPasses(closed)
	assert.Equal(t, closedRan, ran+skipped, "passes after Close")
	assert.Equal(t, 10, countRecords(t, closed, 10))

	// Both remain usable, and Purge removes what they hold.
	for _, s := range []*filestore.Store{none, closed} {
		n, err := s.Purge(context.Background())
		require.NoError(t, err)
		assert.Equal(t, 10, n)
		res, err := s.Claim(context.Background(), req(key(0), "b"))
		require.NoError(t, err)
		assert.Equal(t, storekit.Claimed, res.Outcome)
	}
}

func TestCleanupOptions(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []time.Duration{0, -time.Second} {
		_, err := filestore.New(dir, filestore.WithCleanup(d))
		require.ErrorIs(t, err, storekit.ErrInvalidOption, d)
		storetest.CheckOptionErrors(t, err, "filestore.WithCleanup")
	}
	s, err := filestore.New(dir, filestore.WithoutCleanup(), filestore.WithCleanup(time.Hour))
	require.NoError(t, err, "WithCleanup after WithoutCleanup turns it back on")
	require.NoError(t, s.Close())
}

// TestLayoutBounded: after many keys, the store's directory holds only the
// lock directory and at most 256 fan-out directories, each of those at
// most 16 leaves, and every record sits in the leaf its key hashes to;
// no leaf holds more than a few records.
func TestLayoutBounded(t *testing.T) {
	s, _ := newStore(t, filestore.WithoutSync(), filestore.WithoutCleanup())
	ctx := context.Background()
	const keys = 2000
	for i := range keys {
		_, err := s.Claim(ctx, req(key(i), "n"))
		require.NoError(t, err)
	}
	maxEntries := map[int]int{}
	files := 0
	err := filepath.WalkDir(s.Dir(), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(s.Dir(), p)
		require.NoError(t, err)
		if d.Name() == ".locks" {
			return filepath.SkipDir
		}
		depth := 0
		if rel != "." {
			depth = 1 + countSep(rel)
		}
		if d.IsDir() {
			ents, err := os.ReadDir(p)
			require.NoError(t, err)
			maxEntries[depth] = max(maxEntries[depth], len(ents))
			if depth > 0 {
				assert.Len(t, d.Name(), 3-depth, rel) // <h0h1>/<h2>
			}
			assert.LessOrEqual(t, depth, 2, "directory %s below a leaf", rel)
			return nil
		}
		files++
		assert.Equal(t, 3, depth, "file %s is not in a leaf", rel)
		assert.Equal(t, filestore.RecordPath(s, d.Name()), p)
		return nil
	})
	require.NoError(t, err)
	assert.Equal(t, keys, files)
	assert.LessOrEqual(t, maxEntries[0], 257)
	assert.LessOrEqual(t, maxEntries[1], 16)
	// 2000 keys in 4096 leaves (0.49 a leaf on average): a leaf with more
	// than 10 has odds below 1e-9.
	assert.LessOrEqual(t, maxEntries[2], 10)
	t.Logf("%d keys: top %d entries, largest fan-out directory %d, largest leaf %d", keys, maxEntries[0], maxEntries[1], maxEntries[2])
}

func countSep(p string) int {
	n := 0
	for i := range len(p) {
		if os.IsPathSeparator(p[i]) {
			n++
		}
	}
	return n
}
