package isr_test

import (
	"context"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

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
// dir together (an empty directory left behind counts as one).
func countFiles(t *testing.T, dir string) int {
	t.Helper()
	n, dirs := 0, 0
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == ".locks" {
				return filepath.SkipDir
			}
			if path != dir {
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
		if err == nil && d.IsDir() && path != dir && d.Name() != ".locks" {
			if m, _ := filepath.Glob(filepath.Join(path, "*.json")); len(m) > 0 {
				live++
			}
		}
		return nil
	})
	return n + (dirs - live)
}
