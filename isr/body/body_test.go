package body_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/idem-go/idem/isr/body"
	"github.com/idem-go/idem/isr/internal/bodytest"
)

func TestMemory(t *testing.T) {
	bodytest.Run(t, func(t *testing.T) body.Store { return body.NewMemory() }, true)
}

func TestFile(t *testing.T) {
	bodytest.Run(t, func(t *testing.T) body.Store {
		s, err := body.NewFile(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return s
	}, true)
}

func TestFileLayout(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	dir := filepath.Join(root, "bodies")
	s, err := body.NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Keys that look like paths stay inside the directory.
	for _, key := range []string{"../../escape", "/etc/passwd", "a/../../b", "..", "\x00nul"} {
		if _, err := s.Put(ctx, key, []byte(key), "text/plain"); err != nil {
			t.Fatalf("Put %q: %v", key, err)
		}
		p := s.Path(key)
		if rel, err := filepath.Rel(dir, p); err != nil || strings.HasPrefix(rel, "..") {
			t.Fatalf("path %s of %q is outside %s", p, key, dir)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("mode %v, want 0600", fi.Mode().Perm())
		}
		o, err := s.Get(ctx, key)
		if err != nil || string(o.Content) != key {
			t.Fatalf("Get %q: %v %v", key, o, err)
		}
	}
	// Nothing was written outside the store's directory.
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("%d entries beside the store directory", len(entries))
	}
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Fatalf("directory mode %v, want 0700", fi.Mode().Perm())
	}
	// Two stores on one directory (two processes) see each other's bodies.
	s2, err := body.NewFile(dir)
	if err != nil {
		t.Fatal(err)
	}
	if o, err := s2.Get(ctx, "../../escape"); err != nil || string(o.Content) != "../../escape" {
		t.Fatalf("second store: %v %v", o, err)
	}
	// A damaged file is reported as corrupt, not served.
	if err := os.WriteFile(s.Path("../../escape"), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	var ce *body.CorruptError
	if _, err := s.Get(ctx, "../../escape"); !errors.As(err, &ce) {
		t.Fatalf("Get of damaged file: %v", err)
	}
	if _, err := body.NewFile(""); err == nil {
		t.Fatal("NewFile(\"\") succeeded")
	}
}
