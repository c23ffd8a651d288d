package isr_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/isrtest"
)

func TestMemoryTableLifecycle(t *testing.T) {
	isrtest.RunLifecycle(t, func(t *testing.T, clock *isrtest.Clock) isrtest.Lifecycle {
		tb := newMemoryTable(t, isr.WithTableClock(clock.Now), isr.WithoutCleanup())
		return isrtest.Lifecycle{
			Table:   tb,
			Collect: func(ctx context.Context) error { _, err := tb.Purge(ctx); return err },
			Count:   func(*testing.T) int { return tb.Len() },
		}
	})
}

func TestFileTableLifecycle(t *testing.T) {
	isrtest.RunLifecycle(t, func(t *testing.T, clock *isrtest.Clock) isrtest.Lifecycle {
		dir := t.TempDir()
		tb, err := isr.NewFileTable(dir, isr.WithTableClock(clock.Now), isr.WithoutCleanup(), isr.WithoutFileSync())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = tb.Close() })
		return isrtest.Lifecycle{
			Table:   tb,
			Collect: func(ctx context.Context) error { _, err := tb.Purge(ctx); return err },
			Count:   func(t *testing.T) int { return countFiles(t, dir) },
		}
	})
}

// countFiles counts the item files and the cache-key directories under
// dir together (an empty directory left behind counts as one); the
// fan-out directories, kept by design, are not counted. A file or
// directory a clean-up removes during the walk is not counted.
func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n, dirs := 0, 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && path != dir {
			return nil // removed since its directory was read
		}
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".locks" {
				return filepath.SkipDir
			}
			if path != dir && !isFanDir(dir, path) {
				dirs++
			}
			return nil
		}
		if strings.HasSuffix(d.Name(), ".json") {
			n++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// Each live directory holds at least one item; a directory without
	// one is garbage and shows in the count.
	live := 0
	_ = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() && path != dir && d.Name() != ".locks" && !isFanDir(dir, path) {
			if m, _ := filepath.Glob(filepath.Join(path, "*.json")); len(m) > 0 {
				live++
			}
		}
		return nil
	})
	return n + (dirs - live)
}

// isFanDir reports whether path is a fan-out directory of the FileTable
// in dir: <dir>/<two hex digits> or <dir>/<two hex digits>/<one>.
func isFanDir(dir, path string) bool {
	rel, err := filepath.Rel(dir, path)
	if err != nil {
		return false
	}
	top, leaf, _ := strings.Cut(filepath.ToSlash(rel), "/")
	_, err1 := hex.DecodeString(top)
	_, err2 := hex.DecodeString(leaf + leaf)
	return len(top) == 2 && err1 == nil && len(leaf) <= 1 && err2 == nil
}

func TestTableOptions(t *testing.T) {
	for name, opts := range map[string][]isr.TableOption{
		"nil option":   {nil},
		"zero cleanup": {isr.WithCleanup(0)},
		"negative":     {isr.WithCleanup(-time.Second)},
		"nil clock":    {isr.WithTableClock(nil)},
		"nil logger":   {isr.WithTableLogger(nil)},
		"file sync":    {isr.WithoutFileSync()},
	} {
		tb, err := isr.NewMemoryTable(opts...)
		if tb != nil || !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("NewMemoryTable(%s) = %v, %v; want ErrInvalidOption", name, tb, err)
		}
		if name == "file sync" {
			continue
		}
		ft, err := isr.NewFileTable(t.TempDir(), opts...)
		if ft != nil || !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("NewFileTable(%s) = %v, %v; want ErrInvalidOption", name, ft, err)
		}
	}
}

// TestCleanupRunsByItself: with no Purge call, the tables' own clean-up
// removes what expired; Close stops it.
func TestCleanupRunsByItself(t *testing.T) {
	clock := isrtest.NewClock(isrtest.Base())
	mt := newMemoryTable(t, isr.WithTableClock(clock.Now), isr.WithCleanup(time.Millisecond))
	dir := t.TempDir()
	ft, err := isr.NewFileTable(dir, isr.WithTableClock(clock.Now), isr.WithCleanup(time.Millisecond), isr.WithoutFileSync())
	if err != nil {
		t.Fatal(err)
	}
	defer ft.Close()
	ctx := context.Background()
	now := clock.Now()
	for _, tb := range []isr.Table{mt, ft} {
		for range 10 {
			if _, _, err := tb.BeginRequest(ctx, isr.BeginRequestInput{PK: isrtest.NewPK(t), Key: "k", Hash: "h", Now: now, TTL: now.Unix() + 1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if mt.Len() != 10 || countFiles(t, dir) != 10 {
		t.Fatalf("before expiry: %d items, %d files; want 10 each", mt.Len(), countFiles(t, dir))
	}
	clock.Advance(2 * time.Second)
	deadline := time.Now().Add(10 * time.Second)
	for mt.Len() != 0 || countFiles(t, dir) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("10s after expiry: %d items, %d files; want none", mt.Len(), countFiles(t, dir))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestMemoryTableHeapReturns: once the items of a burst expire and are
// purged, the MemoryTable's maps are rebuilt and the heap returns to near
// where it was (within a tenth of what the burst took).
func TestMemoryTableHeapReturns(t *testing.T) {
	clock := isrtest.NewClock(isrtest.Base())
	tb := newMemoryTable(t, isr.WithTableClock(clock.Now), isr.WithoutCleanup())
	ctx := context.Background()
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	base := heap()
	now := clock.Now()
	const n = 100_000
	for i := range n {
		pk := fmt.Sprintf("CACHE#%064x", i)
		if _, _, err := tb.BeginRequest(ctx, isr.BeginRequestInput{PK: pk, Key: "k", Hash: "h", Now: now, TTL: now.Unix() + 1}); err != nil {
			t.Fatal(err)
		}
	}
	peak := heap()
	clock.Advance(2 * time.Second)
	removed, err := tb.Purge(ctx)
	if err != nil || removed != n {
		t.Fatalf("Purge = %d, %v; want %d", removed, err, n)
	}
	after := heap()
	grew := int64(peak) - int64(base)
	left := int64(after) - int64(base)
	t.Logf("heap: base %d KB, with %d items %d KB, after purge %d KB", base>>10, n, peak>>10, after>>10)
	if left > grew/10 {
		t.Fatalf("heap after purge %d KB above base, of %d KB the items took: not returned", left>>10, grew>>10)
	}
}
