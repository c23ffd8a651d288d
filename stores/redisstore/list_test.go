package redisstore_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/stores/redisstore"
	"github.com/idem-go/idem/stores/storetest"
)

// TestRecordsOtherPrefix: a store lists its own prefix's records only.
func TestRecordsOtherPrefix(t *testing.T) {
	c := standalone(t)
	a, b := newStore(t, c), newStore(t, c)
	storetest.MakeStates(t, a)
	for rec, err := range b.Records(ctxT(t)) {
		if err != nil {
			t.Fatal(err)
		}
		t.Errorf("store b listed %s, a record of store a", rec.Key)
	}
}

// TestSoakRecords (IDEM_SOAK=1) lists 100k records and reports the peak
// heap while it does, sampled every millisecond, against the heap before:
// the listing holds one page (1000 records), whatever the store holds.
func TestSoakRecords(t *testing.T) {
	if os.Getenv("IDEM_SOAK") == "" {
		t.Skip("IDEM_SOAK=1 runs it")
	}
	const n = 100_000
	c := standalone(t)
	s := newStore(t, c)
	fill(t, c, s, n)
	peak, base, got := listPeak(t, s)
	if got != n {
		t.Fatalf("listed %d records, want %d", got, n)
	}
	t.Logf("listed %d records: heap before %.1f MB, peak while listing %.1f MB (+%.1f MB)",
		got, mb(base), mb(peak), mb(peak-base))
	// A listing that held every record would hold n records of ~300 bytes
	// and their keys: 30 MB at least.
	if peak-base > 20<<20 {
		t.Errorf("the heap grew by %.1f MB while listing", mb(peak-base))
	}
}

func mb(n uint64) float64 { return float64(n) / (1 << 20) }

// fill writes n completed records of s, 1000 per pipeline of claims and
// completions through the store itself.
func fill(t *testing.T, c *redis.Client, s *redisstore.Store, n int) {
	ctx := context.Background()
	const batch = 1000
	for i := 0; i < n; i += batch {
		done := make(chan error, batch)
		for j := i; j < i+batch && j < n; j++ {
			go func(j int) {
				sum := sha256.Sum256([]byte(fmt.Sprint(j)))
				key := storekit.StorageKeyPrefix + hex.EncodeToString(sum[:])
				nonce := fmt.Sprintf("n%d", j)
				if _, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: nonce, LeaseTTL: time.Hour, TakeoverAfter: time.Hour}); err != nil {
					done <- err
					return
				}
				done <- s.Complete(ctx, key, nonce, storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`{"n":1}`), TTL: 5 * time.Minute})
			}(j)
		}
		for j := i; j < i+batch && j < n; j++ {
			if err := <-done; err != nil {
				t.Fatal(err)
			}
		}
	}
}

// listPeak lists every record of l while a goroutine samples the heap.
func listPeak(t *testing.T, l storekit.Lister) (peak, base uint64, n int) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	base = ms.HeapAlloc
	var max atomic.Uint64
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		var ms runtime.MemStats
		for {
			runtime.ReadMemStats(&ms)
			if ms.HeapAlloc > max.Load() {
				max.Store(ms.HeapAlloc)
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	for _, err := range l.Records(context.Background()) {
		if err != nil {
			t.Fatal(err)
		}
		n++
	}
	close(stop)
	<-done
	return max.Load(), base, n
}

// TestRecordsForeignKeys: keys of other applications that the SCAN pattern
// matches (a hash, a string that is not a record) are skipped; a value of
// the store's key shape that is not a record is reported corrupt.
func TestRecordsForeignKeys(t *testing.T) {
	c := standalone(t)
	s := newStore(t, c, redisstore.WithPrefix("tf"+randHex(4)+":"))
	ctx := ctxT(t)
	p := strings.TrimSuffix(s.Key(storageKey()), "}")
	p = p[:strings.IndexByte(p, '{')]
	junk := s.Key(storageKey())
	for _, k := range []string{p + "{hash}", p + "{str}", junk} {
		t.Cleanup(func() { c.Del(context.Background(), k) })
	}
	c.HSet(ctx, p+"{hash}", "f", "v")
	c.Set(ctx, p+"{str}", "hello", time.Minute)
	c.Set(ctx, junk, "hello", time.Minute)
	keys := storetest.MakeStates(t, s)
	var corrupt []string
	n := 0
	for rec, err := range s.Records(ctx) {
		var ce *storekit.CorruptRecordError
		if errors.As(err, &ce) {
			corrupt = append(corrupt, ce.Key)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := keys.ByState()[rec.Key]; !ok {
			t.Errorf("listed %s", rec.Key)
		}
		n++
	}
	if n != 4 || len(corrupt) != 1 || corrupt[0] != junk {
		t.Errorf("listed %d records (want 4), corrupt %v (want [%s])", n, corrupt, junk)
	}
}
