package memstore

// Watchers returns how many watches of key are registered.
func (s *Store) Watchers(key string) int {
	s.mem.mu.Lock()
	defer s.mem.mu.Unlock()
	return len(s.mem.watch[key])
}
