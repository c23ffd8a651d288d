package filestore

import "path/filepath"

// StripePath returns the lock file guarding key, so tests can hold it from
// outside the store.
func StripePath(s *Store, key string) string {
	return filepath.Join(s.dir, lockDirName, stripeName(stripeIndex(key)))
}

// CleanLockPath returns the lock file a clean-up pass holds.
func CleanLockPath(s *Store) string { return filepath.Join(s.dir, lockDirName, cleanLockName) }

// RecordPath returns the file holding the record of key.
func RecordPath(s *Store, key string) string { return s.path(key) }

// RecordReads returns how many record files s has opened and read.
func RecordReads(s *Store) int64 { return s.recordReads.Load() }

// CleanPasses returns how many background clean-up passes s ran, and how
// many it skipped because another pass held the clean-up lock.
func CleanPasses(s *Store) (ran, skipped int64) { return s.passes.Load(), s.skipped.Load() }

// NumStripes is the number of lock files.
const NumStripes = numStripes

// SetRemoveWorkers sets how many candidates a clean-up batch removes at
// once (the soak compares counts).
func SetRemoveWorkers(n int) { removeWorkers = n }
