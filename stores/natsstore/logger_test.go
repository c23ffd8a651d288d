package natsstore_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/testenv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem/stores/natsstore"
)

// unreadable is a bucket whose status cannot be read: every clean-up pass
// fails at its first step.
type unreadable struct{ natsstore.KeyValue }

func (unreadable) Status(context.Context) (jetstream.KeyValueStatus, error) {
	return nil, errors.New("status unreadable")
}

// TestCleanupLogsToWithLogger: a failing clean-up pass is logged to the
// logger given with WithLogger.
func TestCleanupLogsToWithLogger(t *testing.T) {
	var out testenv.LogBuffer
	s, err := natsstore.New(unreadable{}, natsstore.WithCleanup(time.Millisecond),
		natsstore.WithLogger(slog.New(slog.NewTextHandler(&out, nil))))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(out.String(), "status unreadable") {
		if time.Now().After(deadline) {
			t.Fatalf("no failed pass logged; the logger holds %q", out.String())
		}
		time.Sleep(time.Millisecond)
	}
	if got := out.String(); !strings.Contains(got, "store=natsstore") || !strings.Contains(got, "level=WARN") {
		t.Errorf("log %q: want a Warn naming the store", got)
	}
}
