package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/gofrs/flock"

	"github.com/idem-go/idem/lease"
	"github.com/idem-go/idem/storekit"
)

// ownersDirName is the directory in .locks of the owner files: one per
// process that opened the store's directory, named by its token and locked
// (flock) by that process for as long as it lives. The kernel releases the
// lock when the process dies, however it dies, so a claim recorded with
// that token is known to be dead at once: the next claim of its key takes
// it over instead of waiting for the takeover threshold.
const ownersDirName = "owners"

// deadOwnerAge is how long an owner file whose process has died is kept
// before a clean-up pass removes it. Without its file an owner is taken
// for alive (a claim of its then falls back to the takeover threshold), so
// the file must outlast the in-progress claims that name it in the usual
// case; an hour covers every call shorter than that.
const deadOwnerAge = time.Hour

// presence is this process's owner file in one store directory.
type presence struct {
	token string
	lock  *flock.Flock
}

// presences holds this process's presence per store directory: every
// Store of a process on one directory shares it (one file lock, one
// descriptor), and it lives as long as the process.
var presences sync.Map // canonical dir -> *presence

// presenceFor returns this process's presence in the store directory
// whose .locks directory is lockDir, made and locked on first use.
func presenceFor(canon, lockDir string) (*presence, error) {
	if p, ok := presences.Load(canon); ok {
		return p.(*presence), nil
	}
	dir := filepath.Join(lockDir, ownersDirName)
	if err := ensureDir(dir); err != nil {
		return nil, err
	}
	p := &presence{token: lease.Token()}
	p.lock = newFlock(filepath.Join(dir, p.token))
	ok, err := p.lock.TryLock()
	if err != nil || !ok {
		return nil, fmt.Errorf("filestore: owner file: %v", errors.Join(err, errors.New("not locked")))
	}
	actual, loaded := presences.LoadOrStore(canon, p)
	if loaded {
		_ = p.lock.Unlock()
		_ = os.Remove(p.lock.Path())
	}
	return actual.(*presence), nil
}

// Owner implements storekit.Presence: this process's token in the store's
// directory.
func (s *Store) Owner() string { return s.owner.token }

// OwnerGone implements storekit.OwnerChecker: owner is gone when its file
// exists and is not locked. A missing file, an unreadable one, or a token
// that is not one this store makes, says nothing: not gone.
func (f files) OwnerGone(_ context.Context, owner string) bool {
	return ownerLiveness(f.s.lockDir, owner) == storekit.Gone
}

// OwnerLiveness implements storekit.LivenessChecker, by OwnerGone's check.
func (s *Store) OwnerLiveness(_ context.Context, owner string) (storekit.Liveness, error) {
	return ownerLiveness(s.lockDir, storekit.OwnerToken(owner)), nil
}

// ownerLiveness says whether the process whose owner file in lockDir is
// named token holds its lock.
func ownerLiveness(lockDir, token string) storekit.Liveness {
	if !isToken(token) {
		return storekit.LivenessUnknown
	}
	path := filepath.Join(lockDir, ownersDirName, token)
	if _, err := os.Stat(path); err != nil {
		return storekit.LivenessUnknown
	}
	fl := newFlock(path)
	ok, err := fl.TryLock()
	if err != nil {
		return storekit.LivenessUnknown
	}
	if !ok {
		return storekit.Alive
	}
	_ = fl.Unlock()
	return storekit.Gone
}

// isToken reports whether s is an owner token: 32 lower-case hex digits.
func isToken(s string) bool {
	if len(s) != 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return false
		}
	}
	return true
}

// purgeOwners removes the owner files of processes that died more than
// deadOwnerAge ago (not locked, not modified since), so that the directory
// holds about one file per live process.
func (c *core) purgeOwners() error {
	dir := filepath.Join(c.lockDir, ownersDirName)
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("filestore: owners: %w", err)
	}
	for _, e := range entries {
		if !isToken(e.Name()) {
			continue
		}
		info, err := e.Info()
		if err != nil || time.Since(info.ModTime()) < deadOwnerAge {
			continue
		}
		path := filepath.Join(dir, e.Name())
		fl := newFlock(path)
		if ok, err := fl.TryLock(); err != nil || !ok {
			continue // alive
		}
		_ = os.Remove(path)
		_ = fl.Unlock()
	}
	return nil
}

var _ storekit.Presence = (*Store)(nil)
var _ storekit.OwnerChecker = files{}
var _ storekit.LivenessChecker = (*Store)(nil)
