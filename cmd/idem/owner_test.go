package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/filestore"
)

// TestLsOwnerState: idem ls and idem inspect say, for an in-progress
// record, whether the process that claimed it is alive, gone (the next
// claim takes the record over at once) or unknown.
func TestLsOwnerState(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s, err := filestore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	claim := func(key, owner string) {
		t.Helper()
		_, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: "n-" + key, LeaseTTL: time.Hour, TakeoverAfter: 30 * time.Minute, Owner: owner})
		if err != nil {
			t.Fatal(err)
		}
	}
	// This process's token (its owner file is locked), a token whose owner
	// file exists and is not locked (its process died), and no owner.
	const dead = "0123456789abcdef0123456789abcdef"
	if err := os.WriteFile(filepath.Join(dir, ".locks", "owners", dead), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	claim("idem:"+strings.Repeat("a", 64), s.Owner())
	claim("idem:"+strings.Repeat("b", 64), dead)
	claim("idem:"+strings.Repeat("c", 64), "")
	want := map[string]string{
		"idem:" + strings.Repeat("a", 64): "alive",
		"idem:" + strings.Repeat("b", 64): "gone",
		"idem:" + strings.Repeat("c", 64): "unknown",
	}
	iv := invoke(ctx, env{}, "ls", "-store", "file:"+dir, "-json")
	if iv.code != 0 {
		t.Fatalf("ls -json: %v", iv)
	}
	for _, line := range strings.Split(strings.TrimSpace(iv.stdout), "\n") {
		var r record
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("ls -json line %q: %v", line, err)
		}
		if r.OwnerState != want[r.StorageKey] {
			t.Errorf("ls: %s owner_state %q, want %q (%s)", r.StorageKey, r.OwnerState, want[r.StorageKey], line)
		}
	}
	iv = invoke(ctx, env{}, "inspect", "-store", "file:"+dir, "-storage-key", "idem:"+strings.Repeat("b", 64))
	if iv.code != 0 || !strings.Contains(iv.stdout, `"owner_state": "gone"`) {
		t.Fatalf("inspect of a dead owner's record: %v", iv)
	}
}
