package filestore

import (
	"context"
	"fmt"
	"hash/fnv"
	"path/filepath"
	"sync"

	"github.com/gofrs/flock"
)

// numStripes is the number of lock files. It is part of the on-disk layout:
// every process sharing a directory must use the same count and hash.
const numStripes = 256

// lockDirName is the subdirectory holding the stripe lock files.
const lockDirName = ".locks"

// cleanLockName is the lock file in .locks that a clean-up pass holds, so
// that of the processes sharing a directory one cleans at a time. It is
// taken without waiting: a pass that finds it held is skipped.
const cleanLockName = "clean"

// stripe is one lock file and the in-process semaphore that serialises the
// goroutines of one Store on it. flock(2) locks belong to an open file
// description and a *flock.Flock short-circuits when it already holds the
// lock, so without the semaphore two goroutines would both "hold" it.
type stripe struct {
	sem  chan struct{} // capacity 1: held while a goroutine owns the stripe
	path string
	mu   sync.Mutex // guards fl replacement after a failed unlock
	fl   *flock.Flock
}

func stripeIndex(key string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return int(h.Sum32() % numStripes)
}

func stripeName(i int) string { return fmt.Sprintf("%02x", i) }

func newStripes(lockDir string) []*stripe {
	s := make([]*stripe, numStripes)
	for i := range s {
		p := filepath.Join(lockDir, stripeName(i))
		s[i] = &stripe{sem: make(chan struct{}, 1), path: p, fl: newFlock(p)}
	}
	return s
}

func newFlock(path string) *flock.Flock {
	return flock.New(path, flock.SetPermissions(0o600))
}

// lock takes the lock of key's stripe: the in-process semaphore first, then
// the file lock. It honours ctx while waiting for either; a blocking flock
// abandoned because ctx ended is released as soon as it is granted.
func (s *core) lock(ctx context.Context, key string) (unlock func() error, err error) {
	st := s.stripes[stripeIndex(key)]
	select {
	case st.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	fl := st.flock()
	ok, err := fl.TryLock()
	if err != nil {
		<-st.sem
		return nil, fmt.Errorf("filestore: lock %s: %w", st.path, err)
	}
	if !ok {
		// Another process holds the stripe: wait in the kernel rather than
		// polling, on a goroutine so that ctx can still end the wait.
		done := make(chan error, 1)
		go func() { done <- fl.Lock() }()
		select {
		case err := <-done:
			if err != nil {
				<-st.sem
				return nil, fmt.Errorf("filestore: lock %s: %w", st.path, err)
			}
		case <-ctx.Done():
			go func() {
				if err := <-done; err == nil {
					_ = st.release(fl)
				}
				<-st.sem
			}()
			return nil, ctx.Err()
		}
	}
	return func() error {
		err := st.release(fl)
		<-st.sem
		return err
	}, nil
}

func (st *stripe) flock() *flock.Flock {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.fl
}

// release unlocks fl. Should unlocking fail, fl may still believe it holds
// the lock and would then grant it to the next goroutine without asking the
// kernel, so it is replaced by a fresh lock object.
func (st *stripe) release(fl *flock.Flock) error {
	err := fl.Unlock()
	if err == nil {
		return nil
	}
	st.mu.Lock()
	st.fl = newFlock(st.path)
	st.mu.Unlock()
	return fmt.Errorf("filestore: unlock %s: %w", st.path, err)
}
