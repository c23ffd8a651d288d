package natsstore

import "context"

// KVKey and StorageKey expose the key mapping to the tests.
var (
	KVKey      = kvKey
	StorageKey = storageKey
	LeaseKey   = leaseKey
)

// BackgroundPass runs one pass of the background clean-up (lease and max
// age rules included) and returns what it removed.
func BackgroundPass(ctx context.Context, s *Store) (int, error) { return s.backgroundPass(ctx) }

// SetBeforeRemove sets the hook a pass calls between its decision and its
// removals; nil removes it.
func SetBeforeRemove(f func(keys []string)) { beforeRemove = f }

// SetPurgePause sets how long a pass rests per unit of work.
func SetPurgePause(f float64) { purgePause = f }

// SetPurgeParallel sets how many removals a pass has in flight.
func SetPurgeParallel(n int) { purgeParallel = n }
