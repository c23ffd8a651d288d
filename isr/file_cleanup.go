package isr

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// fileTmpAge is how old a temporary file must be before the clean-up
// removes it: a writer holds its temporary file for the few milliseconds
// of one write, so an older one was left by a process that crashed.
const fileTmpAge = time.Hour

// purge walks the table's directory and removes every item expired at the
// moment of its removal (collectable, on the table's clock), each under
// its cache key's lock: the item is read without the lock, and read again
// and judged again under it, so an item rewritten meanwhile (a lease
// acquired again, a request begun again) stays. A cache key's directory
// left empty is removed under the same lock. Each lock is held for one
// item's removal, never for the walk.
func (t *fileCore) purge(ctx context.Context) (int, error) {
	dirs, err := os.ReadDir(t.dir)
	if err != nil {
		return 0, fmt.Errorf("isr: file table clean-up: %w", err)
	}
	total := 0
	for _, d := range dirs {
		if !d.IsDir() || len(d.Name()) != 64 {
			continue // .locks, or nothing isr made
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := t.purgeDir(ctx, filepath.Join(t.dir, d.Name()))
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// purgeDir is purge on one cache key's directory.
func (t *fileCore) purgeDir(ctx context.Context, dir string) (int, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("isr: file table clean-up: %w", err)
	}
	n, pk := 0, ""
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, fileTmp) {
			if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > fileTmpAge {
				_ = os.Remove(filepath.Join(dir, name))
			}
			continue
		}
		if !strings.HasSuffix(name, ".json") {
			continue
		}
		it, ipk, sk, ok := t.itemAt(filepath.Join(dir, name))
		if !ok {
			continue // unreadable, or not where its pk and sk put it
		}
		pk = ipk
		if !collectable(sk, it.attrs(), t.now()) {
			continue
		}
		removed, err := t.removeExpired(ctx, ipk, sk)
		if err != nil {
			return n, err
		}
		if removed {
			n++
		}
	}
	if n > 0 && pk != "" {
		if err := t.removeEmptyDir(ctx, pk); err != nil {
			return n, err
		}
	}
	return n, nil
}

// itemAt reads an item file and the pk and sk it holds; ok is false when
// it cannot be read or is not the file its pk and sk name.
func (t *fileCore) itemAt(file string) (it fileItem, pk, sk string, ok bool) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, "", "", false
	}
	if it, err = decodeFileItem(b); err != nil {
		return nil, "", "", false
	}
	pk, ok1 := it.str(AttrPK)
	sk, ok2 := it.str(AttrSK)
	return it, pk, sk, ok1 && ok2 && t.path(pk, sk) == file
}

// readAttrs is the item (pk, sk) as attributes, nil when it is absent or
// unreadable.
func (t *fileCore) readAttrs(pk, sk string) Item {
	it, err := t.read(pk, sk)
	if err != nil || it == nil {
		return nil
	}
	return it.attrs()
}

// removeExpired removes (pk, sk) if, read under pk's lock, it is still
// expired at the table's clock read under the lock.
func (t *fileCore) removeExpired(ctx context.Context, pk, sk string) (bool, error) {
	unlock, err := t.lock(ctx, pk)
	if err != nil {
		return false, err
	}
	defer unlock()
	if !collectable(sk, t.readAttrs(pk, sk), t.now()) {
		return false, nil
	}
	return true, t.remove(pk, sk)
}

// removeEmptyDir removes pk's directory under pk's lock if it holds
// nothing (a writer creates it under the same lock).
func (t *fileCore) removeEmptyDir(ctx context.Context, pk string) error {
	unlock, err := t.lock(ctx, pk)
	if err != nil {
		return err
	}
	defer unlock()
	dir := t.pkDir(pk)
	if entries, err := os.ReadDir(dir); err != nil || len(entries) > 0 {
		return nil
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil // not empty after all: left for the next pass
	}
	return t.syncDir(t.dir)
}

// Purge removes every item whose ttl has passed on the table's clock (a
// LOCK only once its lease has expired too), and the directories of cache
// keys left empty, and returns how many items it removed. It reads every
// item file; each removal holds its cache key's lock for that item alone.
// The clean-up goroutine runs it; call it yourself under WithoutCleanup.
// It returns ctx's error if ctx ends first.
func (t *FileTable) Purge(ctx context.Context) (int, error) {
	if err := t.check(); err != nil {
		return 0, err
	}
	return t.purge(ctx)
}

// Close stops the table's clean-up goroutine and waits for a pass in
// flight to return. The table stays usable; only the background clean-up
// ends. Close may be called more than once and returns nil.
func (t *FileTable) Close() error {
	if t.check() != nil {
		return nil
	}
	return t.cleaner.Close()
}
