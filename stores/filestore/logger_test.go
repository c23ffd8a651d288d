package filestore_test

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testenv"

	"github.com/idem-go/idem/stores/filestore"
)

// TestCleanupLogsToWithLogger: a clean-up pass that fails (its directory
// is gone) is logged to the logger given with WithLogger.
func TestCleanupLogsToWithLogger(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "store")
	var out testenv.LogBuffer
	s, err := filestore.New(dir, filestore.WithCleanup(time.Millisecond),
		filestore.WithLogger(slog.New(slog.NewTextHandler(&out, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "store=filestore") {
		if time.Now().After(deadline) {
			t.Fatalf("no failed pass logged; the logger holds %q", out.String())
		}
		time.Sleep(time.Millisecond)
	}
	if got := out.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "err=") {
		t.Errorf("log %q: want a Warn with the error", got)
	}
}
