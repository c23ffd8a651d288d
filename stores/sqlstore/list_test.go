package sqlstore_test

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/stores/sqlstore"
)

// TestRecordsPages lists more rows than a page holds: each once.
func TestRecordsPages(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		e := newEnv(t, d)
		const n = 2500
		insertCompleted(t, e, n)
		seen := map[string]bool{}
		for rec, err := range e.store.Records(ctxT(t)) {
			if err != nil {
				t.Fatal(err)
			}
			if seen[rec.Key] {
				t.Fatalf("%s listed twice", rec.Key)
			}
			seen[rec.Key] = true
		}
		if len(seen) != n {
			t.Fatalf("listed %d rows, want %d", len(seen), n)
		}
	})
}

// insertCompleted inserts n completed rows (expiring in an hour) in
// multi-row INSERTs of 1000.
func insertCompleted(t testing.TB, e *env, n int) {
	t.Helper()
	exp := time.Now().Add(time.Hour).UnixMilli()
	now := time.Now().UnixMilli()
	for i := 0; i < n; i += 1000 {
		var b strings.Builder
		b.WriteString("INSERT INTO " + e.table + " (key_hash, record_version, claim_nonce, status, attempt_count, payload_hash, result, " +
			"started_at, heartbeat_at, completed_at, expires_at, taken_over_at, takeover_ms) VALUES ")
		for j := i; j < i+1000 && j < n; j++ {
			if j > i {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, "('%s%064x', 1, 'n%d', 'completed', 1, '', NULL, %d, %d, %d, %d, 0, 10000)",
				storekit.StorageKeyPrefix, j, j, now, now, now, exp)
		}
		if _, err := e.db.ExecContext(ctxT(t), b.String()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestSoakRecords (IDEM_SOAK=1) lists 100k rows and reports the peak heap
// while it does, sampled every millisecond, against the heap before.
func TestSoakRecords(t *testing.T) {
	if os.Getenv("IDEM_SOAK") == "" {
		t.Skip("IDEM_SOAK=1 runs it")
	}
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		const n = 100_000
		e := newEnv(t, d)
		insertCompleted(t, e, n)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		base := ms.HeapAlloc
		var peak atomic.Uint64
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			var ms runtime.MemStats
			for {
				runtime.ReadMemStats(&ms)
				if ms.HeapAlloc > peak.Load() {
					peak.Store(ms.HeapAlloc)
				}
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
			}
		}()
		start := time.Now()
		got := 0
		for _, err := range e.store.Records(context.Background()) {
			if err != nil {
				t.Fatal(err)
			}
			got++
		}
		close(stop)
		<-done
		if got != n {
			t.Fatalf("listed %d rows, want %d", got, n)
		}
		p := peak.Load()
		t.Logf("%s: listed %d rows in %v: heap before %.1f MB, peak while listing %.1f MB (+%.1f MB)",
			d, got, time.Since(start).Round(time.Millisecond), float64(base)/(1<<20), float64(p)/(1<<20), float64(p-base)/(1<<20))
		if p-base > 20<<20 {
			t.Errorf("the heap grew by %.1f MB while listing", float64(p-base)/(1<<20))
		}
	})
}
