package filestore

import "path/filepath"

// StripePath returns the lock file guarding key, so tests can hold it from
// outside the store.
func StripePath(s *Store, key string) string {
	return filepath.Join(s.dir, lockDirName, stripeName(stripeIndex(key)))
}

// NumStripes is the number of lock files.
const NumStripes = numStripes
