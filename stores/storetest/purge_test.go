package storetest_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/storetest"
)

// stalePurgeStore is a memstore whose Purge deletes by a stale reading: it
// reads which records have expired (Get answers ErrNotFound), lets other
// callers run, then deletes those keys unconditionally. A claim that
// revives an expired record in between loses its record.
type stalePurgeStore struct {
	*memstore.Store
	mu   sync.Mutex
	keys map[string]bool
}

func (s *stalePurgeStore) Claim(ctx context.Context, r storekit.ClaimRequest) (storekit.ClaimResult, error) {
	s.mu.Lock()
	s.keys[r.Key] = true
	s.mu.Unlock()
	return s.Store.Claim(ctx, r)
}

func (s *stalePurgeStore) Purge(ctx context.Context) (int, error) {
	s.mu.Lock()
	var expired []string
	for k := range s.keys {
		if _, err := s.Get(ctx, k); errors.Is(err, storekit.ErrNotFound) {
			expired = append(expired, k)
		}
	}
	s.mu.Unlock()
	n := 0
	for _, k := range expired {
		runtime.Gosched() // the gap between the reading and the delete
		if err := s.Delete(ctx, k); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// suiteEnv names the store TestPurgeSuiteVictim runs the suite on; unset,
// it is skipped.
const suiteEnv = "IDEM_STORETEST_PURGE_VICTIM"

// TestPurgeSuiteVictim runs the suite on the store suiteEnv names; it is
// run by TestPurgeStaleReadingDetected in a child process.
func TestPurgeSuiteVictim(t *testing.T) {
	kind := os.Getenv(suiteEnv)
	if kind == "" {
		t.Skip("run by TestPurgeStaleReadingDetected")
	}
	storetest.Run(t, storetest.Harness{Purge: []storetest.Purge{{
		NewStoreWithClock: func(t *testing.T, c *storetest.Clock) storekit.Store {
			mem, err := memstore.New(memstore.WithClock(c.Now), memstore.WithRetention(0), memstore.WithoutCleanup())
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = mem.Close() })
			if kind == "stale" {
				return &stalePurgeStore{Store: mem, keys: map[string]bool{}}
			}
			return mem
		},
	}}})
}

// TestPurgeStaleReadingDetected: the suite catches a clean-up that deletes
// by a stale reading. It runs the suite in a child process on memstore
// (which passes) and on stalePurgeStore (whose PurgeRace must fail).
func TestPurgeStaleReadingDetected(t *testing.T) {
	if os.Getenv(suiteEnv) != "" {
		t.Skip("the child process")
	}
	run := func(kind string) (string, error) {
		cmd := exec.Command(os.Args[0], "-test.run=^TestPurgeSuiteVictim$/^Purge$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), suiteEnv+"="+kind)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("memstore")
	if err != nil {
		t.Fatalf("the suite's Purge checks fail on memstore: %v\n%s", err, out)
	}
	out, err = run("stale")
	if err == nil {
		t.Fatalf("the suite passed a Purge that deletes by a stale reading:\n%s", out)
	}
	if !strings.Contains(out, "--- FAIL: TestPurgeSuiteVictim/Purge/ClockRetention0s/PurgeRace") {
		t.Fatalf("PurgeRace did not fail on a Purge that deletes by a stale reading (%v):\n%s", err, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "Purge") && (strings.Contains(line, "want") || strings.Contains(line, "FAIL")) {
			t.Log(strings.TrimSpace(line))
		}
	}
}
