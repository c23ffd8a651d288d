package filestore_test

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/stores/filestore"
)

// TestRecordsJudgeByContent: a record file whose modification time is in
// the past (a file restored from a backup or copied without its times) is
// judged by its content, as Do judges it: a live record is listed, and a
// corrupt one is reported as corrupt. (The listing skipped both by their
// modification time, so `idem ls` did not show the live record and `idem
// stats` counted no corrupt record while Do reported it.)
func TestRecordsJudgeByContent(t *testing.T) {
	s, err := filestore.New(t.TempDir(), filestore.WithoutCleanup())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := context.Background()
	live, bad := key(1), key(2)
	for _, k := range []string{live, bad} {
		if _, err := s.Claim(ctx, req(k, "n")); err != nil {
			t.Fatal(err)
		}
		if err := s.Complete(ctx, k, "n", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("1"), TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filestore.RecordPath(s, bad), []byte("{not a record"), 0o600); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour)
	for _, k := range []string{live, bad} {
		if err := os.Chtimes(filestore.RecordPath(s, k), past, past); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Get(ctx, bad); !errors.Is(err, storekit.ErrCorruptRecord) {
		t.Fatalf("Get of the damaged file: %v, want ErrCorruptRecord", err)
	}
	if _, err := s.Get(ctx, live); err != nil {
		t.Fatalf("Get of the restored file: %v", err)
	}
	listed, corrupt := 0, 0
	for rec, err := range s.Records(ctx) {
		switch {
		case errors.Is(err, storekit.ErrCorruptRecord):
			corrupt++
		case err != nil:
			t.Fatal(err)
		case rec.Key == live:
			listed++
		}
	}
	if listed != 1 || corrupt != 1 {
		t.Fatalf("listing: %d live (want 1), %d corrupt (want 1)", listed, corrupt)
	}
}
