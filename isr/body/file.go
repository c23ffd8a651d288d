package body

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/idem-go/idem/storekit"

	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// fileMagic starts every body file; the media type follows on the same line.
const fileMagic = "idem-body/1 "

// File is a Store keeping one file per key under a directory. The file name is
// the hex SHA-256 of the key, split into a two-character subdirectory and the
// rest, so a key never names a path: "../../etc/passwd" is stored like any
// other string. Files are written to a temporary name, synced and renamed into
// place with mode 0600 (directories 0700), so a reader sees either the old
// body or the new one, never a torn write, even across processes sharing the
// directory.
type File struct {
	dir string
}

// NewFile returns a store rooted at dir, creating it (mode 0700) if needed.
// An empty dir is an *storekit.OptionError matching idem.ErrInvalidOption.
func NewFile(dir string) (*File, error) {
	if strings.TrimSpace(dir) == "" {
		return nil, &storekit.OptionError{Option: "body.NewFile", Reason: "directory is empty"}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("body: NewFile: %w", err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return nil, fmt.Errorf("body: NewFile: %w", err)
	}
	return &File{dir: abs}, nil
}

// check refuses a File that NewFile did not make.
func (f *File) check() error {
	if f == nil || f.dir == "" {
		return &storekit.OptionError{Option: "body.File", Reason: "nil or zero File: use NewFile"}
	}
	return nil
}

// Dir returns the store's root directory ("" for a nil or zero File).
func (f *File) Dir() string {
	if f.check() != nil {
		return ""
	}
	return f.dir
}

// Path returns the file that holds key. It is always inside Dir ("" for a
// nil or zero File).
func (f *File) Path(key string) string {
	if f.check() != nil {
		return ""
	}
	sum := sha256.Sum256([]byte(key))
	h := hex.EncodeToString(sum[:])
	return filepath.Join(f.dir, h[:2], h[2:])
}

// Put implements Store.
func (f *File) Put(ctx context.Context, key string, content []byte, contentType string) (string, error) {
	if err := f.check(); err != nil {
		return "", err
	}
	if err := CheckKey(key); err != nil {
		return "", err
	}
	if err := CheckContentType(contentType); err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	path := f.Path(key)
	sub := filepath.Dir(path)
	if err := os.MkdirAll(sub, 0o700); err != nil {
		return "", fmt.Errorf("body: put %q: %w", key, err)
	}
	tmp, err := os.CreateTemp(sub, ".tmp-*") // mode 0600
	if err != nil {
		return "", fmt.Errorf("body: put %q: %w", key, err)
	}
	ok := false
	defer func() {
		if !ok {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	w := bufio.NewWriter(tmp)
	_, _ = w.WriteString(fileMagic)
	_, _ = w.WriteString(contentType)
	_ = w.WriteByte('\n')
	_, _ = w.Write(content)
	if err := w.Flush(); err != nil {
		return "", fmt.Errorf("body: put %q: %w", key, err)
	}
	if err := tmp.Sync(); err != nil {
		return "", fmt.Errorf("body: put %q: %w", key, err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("body: put %q: %w", key, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return "", fmt.Errorf("body: put %q: %w", key, err)
	}
	ok = true
	return ETag(content), nil
}

// Get implements Store.
func (f *File) Get(ctx context.Context, key string) (*Object, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(f.Path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	if err != nil {
		return nil, fmt.Errorf("body: get %q: %w", key, err)
	}
	if !bytes.HasPrefix(data, []byte(fileMagic)) {
		return nil, &CorruptError{Key: key, Reason: "missing header"}
	}
	data = data[len(fileMagic):]
	nl := bytes.IndexByte(data, '\n')
	if nl < 0 {
		return nil, &CorruptError{Key: key, Reason: "unterminated header"}
	}
	content := data[nl+1:]
	return &Object{Content: content, ContentType: string(data[:nl]), ETag: ETag(content)}, nil
}

// Delete implements Store.
func (f *File) Delete(ctx context.Context, key string) error {
	if err := f.check(); err != nil {
		return err
	}
	if err := CheckKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	err := os.Remove(f.Path(key))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("body: delete %q: %w", key, err)
	}
	return nil
}

// CorruptError reports a stored body that cannot be decoded.
type CorruptError struct {
	Key    string
	Reason string
}

// Error implements error.
func (e *CorruptError) Error() string {
	return fmt.Sprintf("body: corrupt body for %q: %s", e.Key, e.Reason)
}
