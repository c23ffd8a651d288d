package filestore

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/idem-go/idem/storekit"
)

// tmpPrefix starts the name of every temporary file. Keys cannot start with
// a dot, so a temporary file never has a record's name.
const tmpPrefix = ".tmp-"

// leafOf returns the directory that holds the record of key:
// <dir>/<h0h1>/<h2>/, h the hex SHA-256 of the key. 256 fan-out
// directories of 16 leaves each: 4,096 leaves, so a leaf holds about
// 1/4,096 of the records. More leaves would keep each smaller, but every
// leaf a clean-up removes from costs one fsync per batch, and every
// directory costs a block on disk and a read per pass even when empty.
func (c *core) leafOf(key string) string {
	sum := sha256.Sum256([]byte(key))
	var h [4]byte
	hex.Encode(h[:], sum[:2])
	return filepath.Join(c.dir, string(h[0:2]), string(h[2:3]))
}

// path returns the record file of key.
func (c *core) path(key string) string { return filepath.Join(c.leafOf(key), key) }

// isFanName reports whether name is a fan-out directory's name (two
// lower-case hex digits); isLeafName, a leaf's (one).
func isFanName(name string) bool {
	return len(name) == 2 && isHex(name[0]) && isHex(name[1])
}

func isLeafName(name string) bool { return len(name) == 1 && isHex(name[0]) }

func isHex(b byte) bool { return b >= '0' && b <= '9' || b >= 'a' && b <= 'f' }

// read returns the record stored for key, nil if there is none, or a
// *storekit.CorruptRecordError.
func (c *core) read(key string) (*storekit.Record, error) {
	c.recordReads.Add(1)
	b, err := os.ReadFile(c.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("filestore: read %s: %w", key, err)
	}
	r, err := storekit.DecodeRecord(b)
	if err != nil {
		var ce *storekit.CorruptRecordError
		if errors.As(err, &ce) {
			return nil, &storekit.CorruptRecordError{Key: key, Err: ce.Err}
		}
		return nil, &storekit.CorruptRecordError{Key: key, Err: err}
	}
	if r.Key != key {
		return nil, &storekit.CorruptRecordError{Key: key, Err: fmt.Errorf("file holds the record of key %q", r.Key)}
	}
	return r, nil
}

// write replaces the record of key with r: a temporary file in the key's
// leaf directory, whose modification time is set to r.ExpiresAt (so a
// clean-up pass tells an expired record from a live one by lstat alone),
// fsync, rename over the record, fsync of the leaf directory (the rename
// itself must be durable before the write is reported done). The caller
// holds the key's lock.
func (c *core) write(key string, r *storekit.Record) (err error) {
	b, err := storekit.EncodeRecord(r)
	if err != nil {
		return fmt.Errorf("filestore: write %s: %w", key, err)
	}
	leaf := c.leafOf(key)
	f, err := os.CreateTemp(leaf, tmpPrefix+key+"-*")
	if errors.Is(err, fs.ErrNotExist) {
		if err = c.makeLeaf(leaf); err == nil {
			f, err = os.CreateTemp(leaf, tmpPrefix+key+"-*")
		}
	}
	if err != nil {
		return fmt.Errorf("filestore: write %s: %w", key, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = os.Remove(tmp)
		}
	}()
	_, err = f.Write(b)
	if err == nil {
		// After the last write, which would set it to now; before the
		// fsync, which makes it durable with the data.
		exp := time.UnixMilli(r.ExpiresAt)
		err = os.Chtimes(tmp, exp, exp)
	}
	if err == nil && c.sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(leaf, key))
	}
	if err == nil {
		err = c.syncDir(leaf)
	}
	if err != nil {
		return fmt.Errorf("filestore: write %s: %w", key, err)
	}
	return nil
}

// makeLeaf creates the leaf directory and its parent (mode 0700) where
// they are missing, and fsyncs the directory each was made in. It fsyncs
// them also when another process made them first: that process may not
// have got to its fsync yet. Fan-out and leaf directories are never
// removed, so there are at most 256 + 4,096 of them.
func (c *core) makeLeaf(leaf string) error {
	mid := filepath.Dir(leaf)
	for _, d := range []string{mid, leaf} {
		if err := os.Mkdir(d, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		} else if err == nil {
			// Mkdir applies the umask, which can only remove bits.
			if err := os.Chmod(d, 0o700); err != nil {
				return err
			}
		}
		if err := c.syncDir(filepath.Dir(d)); err != nil {
			return err
		}
	}
	return nil
}

// remove deletes the record file of key and fsyncs its directory. The
// caller holds the key's lock.
func (c *core) remove(key string) error {
	leaf := c.leafOf(key)
	err := os.Remove(filepath.Join(leaf, key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("filestore: delete %s: %w", key, err)
	}
	if err := c.syncDir(leaf); err != nil {
		return fmt.Errorf("filestore: delete %s: %w", key, err)
	}
	return nil
}

// syncDir fsyncs directory dir (nothing under WithoutSync).
func (c *core) syncDir(dir string) error {
	if !c.sync || runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
