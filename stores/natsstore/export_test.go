package natsstore

import (
	"context"

	"github.com/nats-io/nats.go/jetstream"
)

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

// Bodies is how many message bodies (records) s's scans received.
func Bodies(s *Store) int64 { return s.bodies.Load() }

// Reads is how many records s's passes read one by one.
func Reads(s *Store) int64 { return s.reads.Load() }

// NoPublish makes s write through the KV API, as on a stream it does not
// publish to.
func NoPublish(s *Store) { s.pub.Store(nil); s.js = nil }

// Publishes says whether a Store on the bucket whose stream is info, with
// the JetStream context js, writes records itself with their expiry in a
// header (else through the KV API).
func Publishes(js jetstream.JetStream, info *jetstream.StreamInfo) bool {
	return newPublisher(js, nil, info) != nil
}

// EntryOp is the KV operation a message's headers say.
var EntryOp = entryOp

// ExpiresHeader is the header that carries a record's ExpiresAt.
const ExpiresHeader = expiresHeader

// SetScanValues makes a pass receive the records with its scan and decide
// on them (on: the pass before expiry headers, to compare).
func SetScanValues(on bool) { scanValues.Store(on) }
