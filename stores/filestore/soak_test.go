//go:build unix

package filestore_test

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/stores/filestore"
)

// TestSoakLifecycle measures what a store holding many records costs its
// clean-up, beside a probe of claims. It runs only with IDEM_SOAK=1 (it
// writes a few hundred thousand files and takes minutes); the sizes are
// IDEM_SOAK_LIVE (default 120000) and IDEM_SOAK_EXPIRED (default 100000);
// IDEM_SOAK_WORKERS sets how many removals a batch runs at once
// (default 1, the store's).
//
//  1. A pass with nothing expired over the live records, against a plain
//     directory walk of the store (filepath.WalkDir, lstat of every entry).
//  2. Purge of the expired records among the live ones, with a probe of
//     fresh claims and replays beside it, against the same probe alone
//     for an equal window afterwards: the worst probe claim and the p99.
//  3. The largest directory of the store afterwards (entries and size).
func TestSoakLifecycle(t *testing.T) {
	if os.Getenv("IDEM_SOAK") != "1" {
		t.Skip("set IDEM_SOAK=1 to run the lifecycle soak (minutes, ~250k files)")
	}
	nLive := soakEnvInt("IDEM_SOAK_LIVE", 120000)
	nExpired := soakEnvInt("IDEM_SOAK_EXPIRED", 100000)
	workers := soakEnvInt("IDEM_SOAK_WORKERS", 1)
	filestore.SetRemoveWorkers(workers)
	defer filestore.SetRemoveWorkers(1)
	ctx := context.Background()
	var off atomic.Int64
	now := func() time.Time { return time.Now().Add(time.Duration(off.Load())) }
	dir := filepath.Join(t.TempDir(), "store")
	opts := append(slices.Clone(soakOpts), filestore.WithClock(now), filestore.WithRetention(0))
	loader, err := filestore.New(dir, append(slices.Clone(opts), filestore.WithoutSync())...)
	if err != nil {
		t.Fatal(err)
	}
	s, err := filestore.New(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	soakLoad(t, loader, "live", nLive, 24*time.Hour)
	t.Logf("loaded %d live records in %v", nLive, time.Since(start).Round(time.Millisecond))

	// 1. Nothing expired: pass against walk, each twice, warm caches.
	soakNothingExpired(t, s, dir, nLive)

	// 2. Expired records among the live ones, removed beside a probe.
	start = time.Now()
	soakLoad(t, loader, "short", nExpired, time.Minute)
	syscall.Sync() // the loader does not fsync: every file's blocks on disk, as a record's are
	t.Logf("loaded %d short-lived records in %v", nExpired, time.Since(start).Round(time.Millisecond))
	off.Store(int64(2 * time.Minute))

	pr := &soakProber{t: t, s: s, replayKeys: make([]string, 64)}
	for i := range pr.replayKeys {
		pr.replayKeys[i] = soakKey("live", i)
	}
	var removed int
	latPurge, dPurge := pr.during(func() {
		n, err := s.Purge(ctx)
		if err != nil {
			t.Errorf("purge: %v", err)
		}
		removed = n
	})
	latBase, _ := pr.during(func() { time.Sleep(dPurge) })
	t.Logf("purge removed %d expired records among %d in %v", removed, nLive+nExpired, dPurge.Round(time.Millisecond))
	maxP, p99P := soakStats(latPurge)
	maxB, p99B := soakStats(latBase)
	t.Logf("probe during purge: %d claims, worst %v, p99 %v", len(latPurge), maxP.Round(10*time.Microsecond), p99P.Round(10*time.Microsecond))
	t.Logf("probe alone (equal window): %d claims, worst %v, p99 %v", len(latBase), maxB.Round(10*time.Microsecond), p99B.Round(10*time.Microsecond))
	t.Logf("worst during purge - worst alone: %v (target < 100ms); p99 ratio %.2f (target <= 2)", (maxP - maxB).Round(10*time.Microsecond), float64(p99P)/float64(p99B))

	// 2b. What the disk allows: as many plain files of a record's size,
	// in the same fan-out, removed by os.Remove with as many at a time,
	// beside the same probe (no lock, no read, no directory fsync).
	raw := filepath.Join(filepath.Dir(dir), "raw")
	paths := soakPlainFiles(t, raw, nExpired)
	latRaw, dRaw := pr.during(func() { soakRemoveAll(t, paths, workers) })
	latRawBase, _ := pr.during(func() { time.Sleep(dRaw) })
	_, p99R := soakStats(latRaw)
	_, p99RB := soakStats(latRawBase)
	t.Logf("plain os.Remove of %d files, %d at a time: %v (Purge: %.2fx); probe p99 %v against %v alone: ratio %.2f",
		nExpired, workers, dRaw.Round(time.Millisecond), float64(dPurge)/float64(dRaw), p99R.Round(10*time.Microsecond), p99RB.Round(10*time.Microsecond), float64(p99R)/float64(p99RB))

	// 3. Directory sizes.
	soakDirSizes(t, dir)
}

// soakWalk walks dir as a plain directory walk does (lstat of every
// entry) and returns how long it took and how many regular files it saw.
func soakWalk(t *testing.T, dir string) (time.Duration, int) {
	t0 := time.Now()
	files := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if _, err := d.Info(); err != nil {
			return err
		}
		if d.Type().IsRegular() {
			files++
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return time.Since(t0), files
}

// soakNothingExpired times a Purge pass of s that finds nothing expired
// against a plain walk of its directory, each twice (warm caches).
func soakNothingExpired(t *testing.T, s *filestore.Store, dir string, nLive int) {
	pass := func() time.Duration {
		t0 := time.Now()
		n, err := s.Purge(context.Background())
		if err != nil || n != 0 {
			t.Fatalf("pass over live records: %d, %v", n, err)
		}
		return time.Since(t0)
	}
	w1, files := soakWalk(t, dir)
	p1 := pass()
	w2, _ := soakWalk(t, dir)
	p2 := pass()
	bestW, bestP := min(w1, w2), min(p1, p2)
	t.Logf("nothing expired, %d live records (%d files): walk %v %v, pass %v %v: pass/walk %.2f",
		nLive, files, w1.Round(time.Millisecond), w2.Round(time.Millisecond), p1.Round(time.Millisecond), p2.Round(time.Millisecond), float64(bestP)/float64(bestW))
}

// soakProber times claims on s beside other work: fresh claims, each
// completed, alternating with replays of replayKeys.
type soakProber struct {
	t          *testing.T
	s          *filestore.Store
	replayKeys []string
	seq        atomic.Int64
}

// probe claims until stop closes and returns each claim's latency.
func (pr *soakProber) probe(stop <-chan struct{}) []time.Duration {
	t, s, ctx := pr.t, pr.s, context.Background()
	var lat []time.Duration
	c := storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`{"id":42}`), TTL: 24 * time.Hour}
	for i := 0; ; i++ {
		select {
		case <-stop:
			return lat
		default:
		}
		if i%2 == 0 {
			k := soakKey("probe", int(pr.seq.Add(1)))
			t0 := time.Now()
			res, err := s.Claim(ctx, soakReq(k))
			lat = append(lat, time.Since(t0))
			if err != nil || res.Outcome != storekit.Claimed {
				t.Errorf("fresh probe claim: %v %v", res.Outcome, err)
				return lat
			}
			if err := s.Complete(ctx, k, "n", c); err != nil {
				t.Errorf("probe complete: %v", err)
				return lat
			}
		} else {
			k := pr.replayKeys[i%len(pr.replayKeys)]
			t0 := time.Now()
			r := soakReq(k)
			r.Nonce = "replay" // a nonce of its own: the record's is a retry of its claim
			res, err := s.Claim(ctx, r)
			lat = append(lat, time.Since(t0))
			if err != nil || res.Outcome != storekit.Existing {
				t.Errorf("replay probe claim: %v %v", res.Outcome, err)
				return lat
			}
		}
	}
}

// during runs the probe while work runs and returns the probe's latencies
// and how long work took.
func (pr *soakProber) during(work func()) ([]time.Duration, time.Duration) {
	stop := make(chan struct{})
	var lat []time.Duration
	var wg sync.WaitGroup
	wg.Go(func() { lat = pr.probe(stop) })
	t0 := time.Now()
	work()
	d := time.Since(t0)
	close(stop)
	wg.Wait()
	return lat, d
}

// soakDirSizes logs how many directories the store has and the largest
// one's entries and size.
func soakDirSizes(t *testing.T, dir string) {
	var maxEntries int
	var maxSize int64
	var dirs int
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		dirs++
		ents, err := os.ReadDir(p)
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		maxEntries = max(maxEntries, len(ents))
		maxSize = max(maxSize, fi.Size())
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after purge: %d directories, the largest has %d entries, the largest directory inode is %d bytes", dirs, maxEntries, maxSize)
}

func soakEnvInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func soakKey(kind string, i int) string { return fmt.Sprintf("idem:%s%059x", kind[:1], i) }

func soakReq(k string) storekit.ClaimRequest {
	return storekit.ClaimRequest{Key: k, Nonce: "n", LeaseTTL: time.Minute, TakeoverAfter: 10 * time.Second}
}

// soakLoad writes n completed records of the given kind, on two goroutines.
func soakLoad(t *testing.T, s *filestore.Store, kind string, n int, ttl time.Duration) {
	ctx := context.Background()
	c := storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`{"id":42}`), TTL: ttl}
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := w; i < n; i += 2 {
				k := soakKey(kind, i)
				if _, err := s.Claim(ctx, soakReq(k)); err != nil {
					t.Error(err)
					return
				}
				if err := s.Complete(ctx, k, "n", c); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// soakPlainFiles writes n files of a record's size into a 256 x 16
// fan-out under dir, syncs them, and returns their paths.
func soakPlainFiles(t *testing.T, dir string, n int) []string {
	data := make([]byte, 300)
	paths := make([]string, n)
	for i := range paths {
		d := filepath.Join(dir, fmt.Sprintf("%02x", i%256), fmt.Sprintf("%x", i/256%16))
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		paths[i] = filepath.Join(d, soakKey("raw", i))
		if err := os.WriteFile(paths[i], data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Sync: a file whose blocks are not allocated yet (delayed
	// allocation) would cost its removal less than a record file does.
	syscall.Sync()
	return paths
}

// soakRemoveAll removes paths, workers at a time.
func soakRemoveAll(t *testing.T, paths []string, workers int) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(paths); i = int(next.Add(1) - 1) {
				if err := os.Remove(paths[i]); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
}

func soakStats(lat []time.Duration) (worst, p99 time.Duration) {
	if len(lat) == 0 {
		return 0, 0
	}
	s := slices.Clone(lat)
	slices.Sort(s)
	return s[len(s)-1], s[len(s)*99/100]
}

// soakOpts keeps the background clean-up out of the measurements.
var soakOpts = []filestore.Option{filestore.WithoutCleanup()}
