package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/gofrs/flock"

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

// Option configures a Store.
type Option func(*config)

type config struct {
	storekit.Options
	sync   bool
	logger *slog.Logger // nil: slog.Default()
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

// DefaultCleanup is about how often an open Store removes expired records
// by itself. A pass reads the directory entries of the store and lstat(2)s
// every record file (about what `find <dir> -type f` costs); it opens only
// the files whose modification time says they have expired.
const DefaultCleanup = time.Minute

// WithCleanup makes the store remove expired records by itself about every
// d (each wait drawn from [d/2, 3d/2)) until Close; the default is
// DefaultCleanup. d must be at least a millisecond; a huge d means
// rarely. It overrides an earlier WithoutCleanup.
func WithCleanup(every time.Duration) Option {
	return func(c *config) { c.SetCleanup(every) }
}

// WithoutCleanup runs no clean-up of the store's own: expired records are
// removed only by Purge, for users who call it from a job of their own. It
// overrides an earlier WithCleanup.
func WithoutCleanup() Option {
	return func(c *config) { c.SetNoCleanup() }
}

// WithLogger sets where a failed clean-up pass is logged (at Warn, with
// the error); the default is slog.Default(). A nil logger is an invalid
// option.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) {
		if l == nil {
			c.Invalid("WithLogger", "logger is nil")
			return
		}
		c.logger = l
	}
}

// Store is a storekit.Store keeping one file per key under a directory. It is
// safe for concurrent use by many goroutines and by many processes on one
// host sharing the directory. See docs/filestore.md for the layout
// and guarantees.
type Store struct {
	*core
	kit     *storekit.Locked  // the decisions, over files{core}
	cleaner *storekit.Cleaner // nil under WithoutCleanup
	owner   *presence         // this process's owner file in dir (presence.go)
}

// core is what a Store and its clean-up goroutine share. The goroutine
// holds the core, never the Store, so a Store dropped without Close
// becomes unreachable and its clean-up is stopped then.
type core struct {
	dir       string
	lockDir   string // <dir>/.locks
	now       func() time.Time
	retention time.Duration // WithRetention
	sync      bool
	stripes   []*stripe
	hub       *storekit.Watchers // shared by the Stores of this directory in this process
	cleanLock *flock.Flock       // held (non-blocking) by a clean-up pass

	// Counters read by the tests (export_test.go).
	recordReads atomic.Int64 // record files opened and read
	passes      atomic.Int64 // clean-up passes run
	skipped     atomic.Int64 // clean-up passes skipped: another one held cleanLock
}

var _ storekit.Store = (*Store)(nil)

// New opens the store in dir, creating it (mode 0700) if it does not exist.
// It refuses a directory that is group- or world-writable (*UnsafeDirError)
// and reports every invalid argument or option, joined, each an
// *storekit.OptionError matching storekit.ErrInvalidOption. Unless WithoutCleanup
// is given, it starts the store's clean-up goroutine; Close stops it.
func New(dir string, opts ...Option) (*Store, error) {
	c := config{Options: storekit.Options{Store: "filestore", Now: time.Now, Retention: DefaultRetention, Cleanup: DefaultCleanup}, sync: true}
	if dir == "" {
		c.Invalid("New", "directory is empty")
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
	cr := &core{
		dir:       abs,
		now:       c.Now,
		retention: c.Retention,
		sync:      c.sync,
		stripes:   newStripes(lockDir),
		hub:       hubFor(canon),
		cleanLock: newFlock(filepath.Join(lockDir, cleanLockName)),
		lockDir:   lockDir,
	}
	owner, err := presenceFor(canon, lockDir)
	if err != nil {
		return nil, err
	}
	s := &Store{core: cr, owner: owner}
	s.kit = storekit.NewLocked(files{cr}, storekit.LockedConfig{Name: "filestore", Now: c.Now, Changed: cr.hub.Notify})
	if !c.NoCleanup {
		s.cleaner = storekit.StartCleaner("filestore", c.Cleanup, c.logger, cr.clean)
		runtime.AddCleanup(s, func(c *storekit.Cleaner) { go c.Close() }, s.cleaner)
	}
	return s, nil
}

// Close stops the store's clean-up goroutine and waits for a pass in
// flight to return. The store stays usable: every call works after Close
// as before it, and Purge removes expired records; only the background
// clean-up ends. Close may be called more than once and always returns
// nil.
func (s *Store) Close() error {
	return s.cleaner.Close()
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

func (c *core) nowMs() int64 { return c.now().UnixMilli() }

// locked runs fn under the lock of key and joins a failure to unlock into
// its error.
func (c *core) locked(ctx context.Context, key string, fn func() error) error {
	unlock, err := c.lock(ctx, key)
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
type files struct{ s *core }

var _ storekit.Backend = files{}

// Load implements storekit.Backend.
func (f files) Load(_ context.Context, key string) (*storekit.Record, error) {
	return f.s.read(key)
}

// Update implements storekit.Backend: read, decide and write under the
// key's lock. A corrupt record is reported without calling fn.
func (f files) Update(ctx context.Context, key string, fn func(cur *storekit.Record) (*storekit.Record, error)) error {
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

// Claim implements storekit.Store. A live record that the claim must leave
// untouched is answered from an unlocked read; anything that writes decides
// again under the key's lock. A corrupt record is reported, never replaced.
func (s *Store) Claim(ctx context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, error) {
	if err := ValidateKey(req.Key); err != nil {
		return storekit.ClaimResult{}, err
	}
	return s.kit.Claim(ctx, req)
}

// Heartbeat implements storekit.Store.
func (s *Store) Heartbeat(ctx context.Context, key, nonce string, leaseTTL time.Duration) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return s.kit.Heartbeat(ctx, key, nonce, leaseTTL)
}

// Complete implements storekit.Store.
func (s *Store) Complete(ctx context.Context, key, nonce string, c storekit.Completion) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return s.kit.Complete(ctx, key, nonce, c)
}

// Release implements storekit.Store: the record is kept with ExpiresAt = now, so
// the next claim continues its attempt counter.
func (s *Store) Release(ctx context.Context, key, nonce string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return s.kit.Release(ctx, key, nonce)
}

// Get implements storekit.Store. It takes no lock: records are replaced whole by
// rename, so it reads either the previous or the next record.
func (s *Store) Get(ctx context.Context, key string) (*storekit.Record, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	return s.kit.Get(ctx, key)
}

// Delete implements storekit.Store. It removes the record whatever its state,
// corrupt records included.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	return s.kit.Delete(ctx, key)
}
