package sqlstore

// CleanupPasses returns how many clean-up passes s has finished, and of
// those how many held the table's clean-up lock for at least one batch.
func CleanupPasses(s *Store) (passes, ran int64) {
	return s.purger.passes.Load(), s.purger.ran.Load()
}

// SetPurgeBatch sets how many rows a batch of s's Purge and clean-up
// removes at most.
func SetPurgeBatch(s *Store, n int) { s.purger.batchSize = n }

// SetPurgePause sets how many times as long as a batch took s's Purge and
// clean-up rest after it.
func SetPurgePause(s *Store, f float64) { s.purger.pause = f }
