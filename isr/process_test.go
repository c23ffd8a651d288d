package isr_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gofrs/flock"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/internal/isrtesting"
)

// openFileBackend is the file table in dir, shared by the test processes,
// with counters in files beside it.
func openFileBackend(t *testing.T, dir string) *isrtesting.ProcBackend {
	return &isrtesting.ProcBackend{
		Table: newFileTable(t, dir),
		Add: func(ctx context.Context, pk, name string, delta int64) (int64, error) {
			return fileCounter(ctx, filepath.Join(dir, "test-counter-"+isr.HashCacheKey(pk)+"-"+name), delta)
		},
		Env: []string{"ISR_LOCATION=" + dir},
	}
}

// TestHelperProcess is the worker process of the tests below; it does
// nothing in a normal test run.
func TestHelperProcess(t *testing.T) {
	isrtesting.HelperProcess(t, func(t *testing.T) *isrtesting.ProcBackend {
		return openFileBackend(t, os.Getenv("ISR_LOCATION"))
	})
}

func TestLeaseContentionAcrossProcesses(t *testing.T) {
	isrtesting.RunLeaseContention(t, openFileBackend(t, t.TempDir()))
}

func TestOneRegenerationAcrossProcesses(t *testing.T) {
	isrtesting.RunOneRegeneration(t, openFileBackend(t, t.TempDir()))
}

// fileCounter adds delta to the number in path under an exclusive flock
// of path+".lock" (a lock of its own per call, so goroutines of one
// process exclude each other too) and returns the new value.
func fileCounter(ctx context.Context, path string, delta int64) (int64, error) {
	fl := flock.New(path + ".lock")
	if err := fl.Lock(); err != nil {
		return 0, err
	}
	defer fl.Close()
	var n int64
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return 0, err
	default:
		if n, err = strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err != nil {
			return 0, fmt.Errorf("counter %s: %w", path, err)
		}
	}
	n += delta
	if delta != 0 {
		if err := os.WriteFile(path, []byte(strconv.FormatInt(n, 10)), 0o600); err != nil {
			return 0, err
		}
	}
	return n, ctx.Err()
}
