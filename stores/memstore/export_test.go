package memstore

// Watchers returns how many watches of key are registered.
func (s *Store) Watchers(key string) int { return s.mem.watch.Len(key) }
