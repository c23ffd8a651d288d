package sqlstore_test

import (
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testenv"

	"github.com/idem-go/idem/stores/sqlstore"
)

// TestCleanupLogsToWithLogger: a clean-up pass that fails (its table was
// never made) is logged to the logger given with WithLogger.
func TestCleanupLogsToWithLogger(t *testing.T) {
	db := openSQLite(t, "file:"+filepath.Join(t.TempDir(), "idem.db")+"?"+sqlstore.SQLiteDSNParams)
	defer db.Close()
	var out testenv.LogBuffer
	s, err := sqlstore.New(db, sqlstore.SQLite, sqlstore.WithTable("never_migrated"), sqlstore.WithCleanup(time.Millisecond),
		sqlstore.WithLogger(slog.New(slog.NewTextHandler(&out, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "store=sqlstore") {
		if time.Now().After(deadline) {
			t.Fatalf("no failed pass logged; the logger holds %q", out.String())
		}
		time.Sleep(time.Millisecond)
	}
	if got := out.String(); !strings.Contains(got, "level=WARN") || !strings.Contains(got, "never_migrated") {
		t.Errorf("log %q: want a Warn with the error naming the table", got)
	}
}
