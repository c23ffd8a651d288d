package isr_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/isrtest"
	"github.com/idem-go/idem/stores/storetest"
)

func newFileTable(t testing.TB, dir string) *isr.FileTable {
	t.Helper()
	tb, err := isr.NewFileTable(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func TestFileTableConformance(t *testing.T) {
	isrtest.Run(t, func(t *testing.T) isr.Table { return newFileTable(t, t.TempDir()) })
}

// Two FileTables on one directory (as two processes would open it) are
// one table.
func TestFileTableSharedDirectoryConformance(t *testing.T) {
	isrtest.Run(t, func(t *testing.T) isr.Table {
		dir := t.TempDir()
		return &alternating{tables: []isr.Table{newFileTable(t, dir), newFileTable(t, dir)}}
	})
}

func TestNewFileTableOptions(t *testing.T) {
	file := filepath.Join(t.TempDir(), "f")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		dir  string
		opts []isr.FileOption
	}{{dir: ""}, {dir: " "}, {dir: file}, {dir: t.TempDir(), opts: []isr.FileOption{nil}}} {
		tb, err := isr.NewFileTable(c.dir, c.opts...)
		if tb != nil || !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("NewFileTable(%q, %d options) = %v, %v", c.dir, len(c.opts), tb, err)
		}
	}
	_, err := isr.NewFileTable(file, nil, isr.WithoutFileSync(), nil)
	storetest.CheckOptionErrors(t, err, "isr.NewFileTable", "isr.NewFileTable", "isr.NewFileTable")
}
