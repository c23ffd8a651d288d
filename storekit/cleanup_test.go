package storekit_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testenv"

	"github.com/idem-go/idem/storekit"
)

// TestCleanerLogsToGivenLogger: a failing pass is logged, with the store's
// name and the error, to the logger given to StartCleaner, not to
// slog.Default().
func TestCleanerLogsToGivenLogger(t *testing.T) {
	var out testenv.LogBuffer
	logger := slog.New(slog.NewTextHandler(&out, nil))
	failed := make(chan struct{}, 1)
	c := storekit.StartCleaner("teststore", storekit.MinCleanup, logger, func(context.Context) error {
		select {
		case failed <- struct{}{}:
		default:
		}
		return errors.New("disk on fire")
	})
	defer c.Close()
	<-failed
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "disk on fire") {
		if time.Now().After(deadline) {
			t.Fatalf("no clean-up failure logged; the logger holds %q", out.String())
		}
		time.Sleep(time.Millisecond)
	}
	_ = c.Close()
	got := out.String()
	for _, want := range []string{"level=WARN", "store=teststore", "err=\"disk on fire\""} {
		if !strings.Contains(got, want) {
			t.Errorf("log %q lacks %q", got, want)
		}
	}
}
