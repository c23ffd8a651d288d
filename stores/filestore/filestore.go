package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/storekit"
)

// ErrUnsafeDir is matched (errors.Is) by the error New returns for a
// directory that other users could write to.
var ErrUnsafeDir = errors.New("filestore: unsafe directory")

// UnsafeDirError says which directory New refused and why. It matches
// ErrUnsafeDir.
type UnsafeDirError struct {
	Path string      // the directory
	Mode fs.FileMode // its permission bits
}

func (e *UnsafeDirError) Error() string {
	return fmt.Sprintf("filestore: directory %s has mode %v: group- or world-writable directories are refused (chmod go-w it, or use another directory)", e.Path, e.Mode.Perm())
}

// Is makes an UnsafeDirError match ErrUnsafeDir.
func (e *UnsafeDirError) Is(target error) bool { return target == ErrUnsafeDir }

// tmpPrefix starts the name of every temporary file. Keys cannot start with
// a dot, so a temporary file never has a record's name.
const tmpPrefix = ".tmp-"

// Option configures a Store.
type Option func(*config)

type config struct {
	storekit.Options
	sync bool
}

// WithClock sets the clock that decides expiry and staleness (default
// time.Now). Tests use it to drive time.
func WithClock(now func() time.Time) Option {
	return func(c *config) { c.SetClock(now) }
}

// DefaultRetention is how long a record is kept past its ExpiresAt before
// Purge may remove it.
const DefaultRetention = time.Minute

// WithRetention sets how long past its ExpiresAt a record is kept before
// Purge may remove it (default DefaultRetention; 0 removes it as soon as it
// has expired). Retention keeps the attempt counter, and so the fencing
// token, of a recently expired or released key monotonic for that long.
// Every store of this module has this option with this meaning.
func WithRetention(d time.Duration) Option {
	return func(c *config) { c.SetRetention(d) }
}

// WithoutSync skips the fsync of each written record and of the directory.
// Writes stay atomic and survive a crash of the process, but a power loss or
// kernel crash may lose or roll back recent transitions. Meant for tests and
// scratch directories.
func WithoutSync() Option {
	return func(c *config) { c.sync = false }
}

// Store is an idem.Store keeping one file per key in a directory. It is safe for concurrent use by many goroutines and by many
// processes on one host sharing the directory. See the package doc for the
// layout and guarantees.
type Store struct {
	dir       string
	now       func() time.Time
	retention time.Duration // WithRetention
	sync      bool
	stripes   []*stripe
	hub       *storekit.Watchers // shared by the Stores of this directory in this process
	kit       *storekit.Locked   // the decisions, over files{s}
}

var _ idem.Store = (*Store)(nil)

// New opens the store in dir, creating it (mode 0700) if it does not exist.
// It refuses a directory that is group- or world-writable (*UnsafeDirError)
// and reports every invalid argument or option, joined, each an
// *idem.OptionError matching idem.ErrInvalidOption.
func New(dir string, opts ...Option) (*Store, error) {
	c := config{Options: storekit.Options{Now: time.Now, Retention: DefaultRetention}, sync: true}
	if dir == "" {
		c.Invalid("dir", "directory is empty")
	}
	for _, o := range opts {
		if o == nil {
			c.Invalid("New", "nil option")
			continue
		}
		o(&c)
	}
	if err := c.Err(); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	if err := ensureDir(abs); err != nil {
		return nil, err
	}
	lockDir := filepath.Join(abs, lockDirName)
	if err := ensureDir(lockDir); err != nil {
		return nil, err
	}
	canon, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("filestore: %w", err)
	}
	s := &Store{
		dir:       abs,
		now:       c.Now,
		retention: c.Retention,
		sync:      c.sync,
		stripes:   newStripes(lockDir),
		hub:       hubFor(canon),
	}
	s.kit = storekit.NewLocked(files{s}, storekit.LockedConfig{Name: "filestore", Now: c.Now, Changed: s.hub.Notify})
	return s, nil
}

// ensureDir creates dir with mode 0700 if it is missing, and checks that an
// existing one is a directory that only its owner can write to.
func ensureDir(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return fmt.Errorf("filestore: create directory: %w", err)
		}
		// MkdirAll applies the umask, which can only remove bits; make the
		// mode exactly 0700 whatever it is.
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("filestore: create directory: %w", err)
		}
		fi, err = os.Stat(dir)
	}
	if err != nil {
		return fmt.Errorf("filestore: %w", err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("filestore: %s is not a directory", dir)
	}
	if runtime.GOOS != "windows" && fi.Mode().Perm()&0o022 != 0 {
		return &UnsafeDirError{Path: dir, Mode: fi.Mode()}
	}
	return nil
}

// Dir returns the absolute path of the store directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) nowMs() int64 { return s.now().UnixMilli() }

func (s *Store) path(key string) string { return filepath.Join(s.dir, key) }

// read returns the record stored for key, nil if there is none, or a
// *idem.CorruptRecordError.
func (s *Store) read(key string) (*idem.Record, error) {
	b, err := os.ReadFile(s.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("filestore: read %s: %w", key, err)
	}
	r, err := storekit.DecodeRecord(b)
	if err != nil {
		var ce *idem.CorruptRecordError
		if errors.As(err, &ce) {
			return nil, &idem.CorruptRecordError{Key: key, Err: ce.Err}
		}
		return nil, &idem.CorruptRecordError{Key: key, Err: err}
	}
	if r.Key != key {
		return nil, &idem.CorruptRecordError{Key: key, Err: fmt.Errorf("file holds the record of key %q", r.Key)}
	}
	return r, nil
}

// write replaces the record of key with r: temporary file, fsync, rename,
// fsync of the directory. The caller holds the key's lock.
func (s *Store) write(key string, r *idem.Record) (err error) {
	b, err := storekit.EncodeRecord(r)
	if err != nil {
		return fmt.Errorf("filestore: write %s: %w", key, err)
	}
	f, err := os.CreateTemp(s.dir, tmpPrefix+key+"-*")
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
	if err == nil && s.sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, s.path(key))
	}
	if err != nil {
		return fmt.Errorf("filestore: write %s: %w", key, err)
	}
	if err := s.syncDir(); err != nil {
		return fmt.Errorf("filestore: write %s: %w", key, err)
	}
	return nil
}

// remove deletes the record file of key. The caller holds the key's lock.
func (s *Store) remove(key string) error {
	err := os.Remove(s.path(key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("filestore: delete %s: %w", key, err)
	}
	if err := s.syncDir(); err != nil {
		return fmt.Errorf("filestore: delete %s: %w", key, err)
	}
	return nil
}

func (s *Store) syncDir() error {
	if !s.sync || runtime.GOOS == "windows" {
		return nil
	}
	d, err := os.Open(s.dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// locked runs fn under the lock of key and joins a failure to unlock into
// its error.
func (s *Store) locked(ctx context.Context, key string, fn func() error) error {
	unlock, err := s.lock(ctx, key)
	if err != nil {
		return err
	}
	err = fn()
	if uerr := unlock(); uerr != nil {
		err = errors.Join(err, uerr)
	}
	return err
}

// files is the storekit.Backend under a Store: one file per record, read
// without a lock (records are replaced whole by rename, so a read sees the
// previous or the next one), written under the key's stripe lock.
type files struct{ s *Store }

var _ storekit.Backend = files{}

// Load implements storekit.Backend.
func (f files) Load(_ context.Context, key string) (*idem.Record, error) {
	return f.s.read(key)
}

// Update implements storekit.Backend: read, decide and write under the
// key's lock. A corrupt record is reported without calling fn.
func (f files) Update(ctx context.Context, key string, fn func(cur *idem.Record) (*idem.Record, error)) error {
	return f.s.locked(ctx, key, func() error {
		cur, err := f.s.read(key)
		if err != nil {
			return err
		}
		next, err := fn(cur)
		if err != nil || next == nil {
			return err
		}
		return f.s.write(key, next)
	})
}

// Delete implements storekit.Backend. It removes the record whatever its
// state, corrupt records included.
func (f files) Delete(ctx context.Context, key string) error {
	return f.s.locked(ctx, key, func() error { return f.s.remove(key) })
}

// Claim implements idem.Store. A live record that the claim must leave
// untouched is answered from an unlocked read; anything that writes decides
// again under the key's lock. A corrupt record is reported, never replaced.
func (s *Store) Claim(ctx context.Context, req idem.ClaimRequest) (idem.ClaimResult, error) {
	if err := ValidateKey(req.Key); err != nil {
		return idem.ClaimResult{}, err
	}
	return s.kit.Claim(ctx, req)
}

// Heartbeat implements idem.Store.
func (s *Store) Heartbeat(ctx context.Context, key, nonce string, leaseTTL time.Duration) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return s.kit.Heartbeat(ctx, key, nonce, leaseTTL)
}

// Complete implements idem.Store.
func (s *Store) Complete(ctx context.Context, key, nonce string, c idem.Completion) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return s.kit.Complete(ctx, key, nonce, c)
}

// Release implements idem.Store: the record is kept with ExpiresAt = now, so
// the next claim continues its attempt counter.
func (s *Store) Release(ctx context.Context, key, nonce string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return s.kit.Release(ctx, key, nonce)
}

// Get implements idem.Store. It takes no lock: records are replaced whole by
// rename, so it reads either the previous or the next record.
func (s *Store) Get(ctx context.Context, key string) (*idem.Record, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	return s.kit.Get(ctx, key)
}

// Delete implements idem.Store. It removes the record whatever its state,
// corrupt records included.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return s.kit.Delete(ctx, key)
}

// Purge removes the records that expired more than the retention period
// (WithRetention) ago, and temporary files left behind by a crashed write,
// and returns how many records it removed. Each removal happens under the key's lock after
// reading the record again, so Purge is safe while other goroutines and
// processes use the store. Corrupt records are left in place. Failures on
// single files do not stop the sweep; they are returned joined, with the
// count of what was removed.
func (s *Store) Purge(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return 0, fmt.Errorf("filestore: purge: %w", err)
	}
	var (
		n    int
		errs []error
	)
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return n, errors.Join(append(errs, err)...)
		}
		name := e.Name()
		if strings.HasPrefix(name, tmpPrefix) {
			if err := s.purgeTemp(ctx, name); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if !e.Type().IsRegular() || ValidateKey(name) != nil {
			continue
		}
		removed, err := s.purgeRecord(ctx, name)
		if err != nil {
			errs = append(errs, err)
		}
		if removed {
			n++
		}
	}
	return n, errors.Join(errs...)
}

func (s *Store) expired(r *idem.Record) bool {
	return r.ExpiresAt+s.retention.Milliseconds() <= s.nowMs()
}

func (s *Store) purgeRecord(ctx context.Context, key string) (bool, error) {
	// An unlocked look first, so live records cost no lock.
	r, err := s.read(key)
	if err != nil || r == nil || !s.expired(r) {
		return false, nil // corrupt, gone or live
	}
	removed := false
	err = s.locked(ctx, key, func() error {
		r, err := s.read(key)
		if err != nil || r == nil || !s.expired(r) {
			return nil
		}
		if err := s.remove(key); err != nil {
			return err
		}
		removed = true
		return nil
	})
	if removed {
		s.hub.Notify(key)
	}
	return removed, err
}

// purgeTemp removes the temporary file name if it belongs to a valid key.
// Writers hold the key's lock from creating a temporary file to renaming it,
// so under that lock any temporary file of the key is left over from a
// crash.
func (s *Store) purgeTemp(ctx context.Context, name string) error {
	rest := strings.TrimPrefix(name, tmpPrefix)
	i := strings.LastIndexByte(rest, '-')
	if i <= 0 {
		return nil
	}
	key := rest[:i]
	if ValidateKey(key) != nil {
		return nil
	}
	return s.locked(ctx, key, func() error {
		err := os.Remove(filepath.Join(s.dir, name))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("filestore: purge %s: %w", name, err)
		}
		return nil
	})
}
