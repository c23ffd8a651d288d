package isr

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// purge walks the table's fan-out directories and the cache keys'
// directories in them, and lstats every item file: a file whose
// modification time (fileExpiry, set by every write) has not passed on
// the table's clock is not opened. Every other file is a candidate, read
// and judged (collectable) under its cache key's lock, and removed if it
// is expired at that moment, so an item rewritten meanwhile (a lease
// acquired again, a request begun again) stays. A cache key's directory
// left empty is removed under the same lock, and so is every temporary
// file (writers hold the lock from making one to renaming it, so under the
// lock any temporary file was left by a crashed writer). Each lock is held
// for one file's removal, never for the walk.
func (t *fileCore) purge(ctx context.Context) (int, error) {
	fans, err := os.ReadDir(t.dir)
	if err != nil {
		return 0, fmt.Errorf("isr: file table clean-up: %w", err)
	}
	total := 0
	for _, f := range fans {
		if !f.IsDir() || !isHex(f.Name(), 2) {
			continue // .locks, or nothing isr made
		}
		n, err := t.purgeFan(ctx, f.Name())
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// isHex reports whether s is n lower-case hex digits.
func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range []byte(s) {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// purgeFan is purge on one top fan-out directory, named fan.
func (t *fileCore) purgeFan(ctx context.Context, fan string) (int, error) {
	leaves, err := os.ReadDir(filepath.Join(t.dir, fan))
	if err != nil {
		return 0, fmt.Errorf("isr: file table clean-up: %w", err)
	}
	total := 0
	for _, l := range leaves {
		if !l.IsDir() || !isHex(l.Name(), 1) {
			continue // nothing isr made
		}
		n, err := t.purgeLeaf(ctx, fan+l.Name())
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// purgeLeaf is purge on one leaf fan-out directory, <dir>/<h0h1>/<h2>,
// prefix being h0h1h2.
func (t *fileCore) purgeLeaf(ctx context.Context, prefix string) (int, error) {
	keys, err := os.ReadDir(filepath.Join(t.dir, prefix[:2], prefix[2:]))
	if err != nil {
		return 0, fmt.Errorf("isr: file table clean-up: %w", err)
	}
	total := 0
	for _, k := range keys {
		if !k.IsDir() || !isHex(k.Name(), 64) || k.Name()[:3] != prefix {
			continue // nothing isr made, or not where isr would look for it
		}
		if err := ctx.Err(); err != nil {
			return total, err
		}
		n, err := t.purgeDir(ctx, k.Name())
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// purgeDir is purge on the directory of one cache key, named keyHex (the
// sha256 hex of its pk).
func (t *fileCore) purgeDir(ctx context.Context, keyHex string) (int, error) {
	dir := t.keyDir(keyHex)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("isr: file table clean-up: %w", err)
	}
	stripe, now := stripeOf(keyHex), t.now()
	n, gone := 0, 0
	for _, e := range entries {
		name := e.Name()
		tmp := strings.HasPrefix(name, fileTmp)
		if !tmp {
			if !strings.HasSuffix(name, ".json") || !e.Type().IsRegular() {
				continue
			}
			fi, err := e.Info() // lstat: the file is not opened
			if err != nil || fi.ModTime().After(now) {
				continue // gone since ReadDir, or live by its modification time
			}
		}
		removed, err := t.removeCandidate(ctx, stripe, filepath.Join(dir, name), tmp)
		if err != nil {
			return n, err
		}
		if removed {
			gone++
			if !tmp {
				n++
			}
		}
	}
	if gone == len(entries) {
		if err := t.removeEmptyDir(ctx, stripe, dir); err != nil {
			return n, err
		}
	}
	return n, nil
}

// removeCandidate removes, under the lock of stripe, the temporary file
// file, or the item file file if, read under the lock, it is the item its
// pk and sk name and is expired at the table's clock read under the lock.
// A live item's file gets its modification time set to fileExpiry, so
// that a file written otherwise than by a FileTable is opened once.
func (t *fileCore) removeCandidate(ctx context.Context, stripe int, file string, tmp bool) (bool, error) {
	unlock, err := t.lockStripe(ctx, stripe)
	if err != nil {
		return false, err
	}
	defer unlock()
	if tmp {
		err := os.Remove(file)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, fmt.Errorf("isr: file table clean-up: %w", err)
		}
		return err == nil, nil
	}
	it, pk, sk, ok := t.itemAt(file)
	if !ok {
		return false, nil // gone, unreadable, or not where its pk and sk put it
	}
	if !collectable(sk, it.attrs(), t.now()) {
		if exp := fileExpiry(sk, it); exp.After(t.now()) {
			_ = os.Chtimes(file, exp, exp)
		}
		return false, nil
	}
	return true, t.remove(pk, sk)
}

// itemAt reads an item file and the pk and sk it holds; ok is false when
// it cannot be read or is not the file its pk and sk name.
func (t *fileCore) itemAt(file string) (it fileItem, pk, sk string, ok bool) {
	t.purgeReads.Add(1)
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

// removeEmptyDir removes a cache key's directory dir under the lock of
// its stripe if it holds nothing (a writer makes it under the same lock).
// The fan-out directories above it are kept.
func (t *fileCore) removeEmptyDir(ctx context.Context, stripe int, dir string) error {
	unlock, err := t.lockStripe(ctx, stripe)
	if err != nil {
		return err
	}
	defer unlock()
	if entries, err := os.ReadDir(dir); err != nil || len(entries) > 0 {
		return nil
	}
	if err := os.Remove(dir); err != nil {
		return nil // not empty after all, or gone: left for the next pass
	}
	return t.syncDir(filepath.Dir(dir))
}

// Purge removes every item whose ttl has passed on the table's clock (a
// LOCK only once its lease has expired too), the directories of cache keys
// left empty and the temporary files of crashed writes, and returns how
// many items it removed. It lstats every item file and opens only those
// whose modification time (the item's ttl, set by every write; see
// FileTable) has passed, so a Purge that finds nothing expired reads no
// item. Each of those is read and judged under its cache key's lock, held
// for that file alone. The clean-up goroutine runs it; call it yourself
// under WithoutCleanup.
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
