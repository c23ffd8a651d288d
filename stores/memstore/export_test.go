package memstore

// Watchers returns how many watches of key are registered.
func (s *Store) Watchers(key string) int { return s.mem.watch.Len(key) }

// CleanupPasses returns how many clean-up passes the store's goroutine has
// finished.
func (s *Store) CleanupPasses() int64 { return s.mem.passes.Load() }

// Cleaning reports whether the store runs a clean-up goroutine.
func (s *Store) Cleaning() bool { return s.cleaner != nil }
