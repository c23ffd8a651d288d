package sqlstore

// Resent returns how often s sent a claim again because a concurrent write
// made its answer out of date.
func Resent(s *Store) int64 { return s.resent.Load() }

// Transient exposes the transient-error classification to tests.
var Transient = transient
