package natsstore_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem/stores/natsstore"
)

// lockedBuffer is a bytes.Buffer a logger in another goroutine writes to.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// unreadable is a bucket whose status cannot be read: every clean-up pass
// fails at its first step.
type unreadable struct{ natsstore.KeyValue }

func (unreadable) Status(context.Context) (jetstream.KeyValueStatus, error) {
	return nil, errors.New("status unreadable")
}

// TestCleanupLogsToWithLogger: a failing clean-up pass is logged to the
// logger given with WithLogger.
func TestCleanupLogsToWithLogger(t *testing.T) {
	var out lockedBuffer
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
