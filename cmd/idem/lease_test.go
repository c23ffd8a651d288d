// The tests run commands with sh and signal process groups.

//go:build unix

package main

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"
)

// failingHeartbeats is a store whose heartbeats fail as if the store could
// not be reached from this host.
type failingHeartbeats struct{ storekit.Store }

func (failingHeartbeats) Heartbeat(context.Context, string, string, time.Duration) error {
	return errors.New("injected: store unreachable")
}

// TestLeaseExpiry: a run whose heartbeats keep failing stops its command
// before its claim could be taken over elsewhere, and releases the claim.
func TestLeaseExpiry(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			e := env{"COUNTER": filepath.Join(dir, "counter"), "DIR": dir, "IDEM_STORE": storeSpec(t, kind)}
			testWrapStore = func(s storekit.Store) storekit.Store { return failingHeartbeats{s} }
			first := background(context.Background(), e, append([]string{"run", "-takeover-after", "600ms", "-heartbeat", "100ms", "-kill-grace", "5s", "-key", "k"}, holding(dir)...)...)
			var iv invocation
			select {
			case iv = <-first:
			case <-time.After(30 * time.Second):
				t.Fatal("the run kept its command running without a fresh claim")
			}
			testWrapStore = nil
			if iv.code != exitLost || !strings.Contains(iv.stderr, "could not be refreshed") || !strings.Contains(iv.stderr, "injected: store unreachable") {
				t.Fatalf("run: %v", iv)
			}
			// The claim was released: the next run runs at once.
			iv = invoke(context.Background(), e, "run", "-key", "k", "--", "sh", "-c", `echo "$IDEM_FENCING_TOKEN"`)
			if iv.code != 0 || iv.stdout != "2\n" {
				t.Fatalf("next run: %v", iv)
			}
		})
	}
}

// TestLeaseExpiryKillsQuickly: a command that ignores SIGTERM is killed
// within half a heartbeat interval when its claim cannot be refreshed, not
// after the (long) -kill-grace.
func TestLeaseExpiryKillsQuickly(t *testing.T) {
	dir := t.TempDir()
	e := env{"COUNTER": filepath.Join(dir, "counter"), "DIR": dir, "IDEM_STORE": storeSpec(t, "mem")}
	testWrapStore = func(s storekit.Store) storekit.Store { return failingHeartbeats{s} }
	defer func() { testWrapStore = nil }()
	iv := invoke(context.Background(), e, "run", "-takeover-after", "600ms", "-heartbeat", "200ms", "-kill-grace", "1h", "-key", "k",
		"--", "sh", "-c", `trap '' TERM; sleep 60`)
	if iv.code != exitLost || !strings.Contains(iv.stderr, "exit 137") {
		t.Fatalf("run: %v", iv)
	}
}

// TestLeaseHealthy: a command that runs longer than the takeover threshold
// keeps running while its heartbeats succeed.
func TestLeaseHealthy(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			e := env{"IDEM_STORE": storeSpec(t, kind)}
			iv := invoke(context.Background(), e, "run", "-takeover-after", "1s", "-heartbeat", "100ms", "-key", "k", "--", "sh", "-c", "sleep 1.5; echo done")
			if iv.code != 0 || iv.stdout != "done\n" {
				t.Fatalf("run: %v", iv)
			}
		})
	}
}
