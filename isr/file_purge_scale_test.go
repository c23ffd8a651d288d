package isr_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/idem-go/idem/isr"
)

// TestFileTablePurgeScale times Purge passes over ISR_PURGE_SCALE live
// REQ# items (one per cache key, nothing expired) beside a plain
// filepath.WalkDir of the same tree that lstats every file. It measures;
// it never fails on timings, and is skipped unless ISR_PURGE_SCALE is set:
//
//	ISR_PURGE_SCALE=100000 nice -n 19 go test -run TestFileTablePurgeScale -v .
func TestFileTablePurgeScale(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("ISR_PURGE_SCALE"))
	if n <= 0 {
		t.Skip("ISR_PURGE_SCALE not set")
	}
	clock, dir, tb := purgeTable(t)
	ctx := context.Background()
	now := clock.Now()
	start := time.Now()
	for i := range n {
		pk := fmt.Sprintf("CACHE#/page/%d", i)
		if _, _, err := tb.BeginRequest(ctx, isr.BeginRequestInput{PK: pk, Key: "k", Hash: "h", Now: now, TTL: now.Unix() + 86400}); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote %d items in %v", n, time.Since(start).Round(time.Millisecond))
	walk := func() (int, time.Duration) {
		start, files := time.Now(), 0
		err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if !d.IsDir() {
				if _, err := d.Info(); err != nil {
					return err
				}
				files++
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return files, time.Since(start)
	}
	for pass := range 3 {
		files, w := walk()
		start := time.Now()
		removed, err := tb.Purge(ctx)
		p := time.Since(start)
		if err != nil || removed != 0 {
			t.Fatalf("Purge = %d, %v; want 0", removed, err)
		}
		t.Logf("pass %d: Purge %v, WalkDir+lstat of %d files %v (%.2fx)", pass, p.Round(time.Millisecond), files, w.Round(time.Millisecond), float64(p)/float64(w))
	}
}
