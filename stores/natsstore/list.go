package natsstore

import (
	"context"
	"iter"

	"github.com/idem-go/idem/storekit"

	"github.com/nats-io/nats.go/jetstream"
)

var _ storekit.Lister = (*Store)(nil)

// Records implements storekit.Lister. A bucket keeps no index of its keys
// that a listing could page through: it reads the whole bucket, every
// key's last entry, as a clean-up pass does (through a pull consumer on
// the bucket's stream, 100 messages per request, when the Store knows the
// stream: a bucket of CreateBucket, or WithJetStream; through a KV watch
// otherwise), and yields the store's live records. Neither takes a lock
// on a key, so claims go on while it runs; memory holds one chunk. Keys
// that are not the store's (its clean-up lease, another application's
// keys) and delete markers are skipped.
func (s *Store) Records(ctx context.Context) iter.Seq2[*storekit.Record, error] {
	return func(yield func(*storekit.Record, error) bool) {
		sc, err := s.listScanner(ctx)
		if err != nil {
			yield(nil, err)
			return
		}
		defer sc.stop()
		for {
			chunk, done, err := sc.next(ctx)
			if err != nil {
				yield(nil, err)
				return
			}
			now := s.nowMs()
			for _, e := range chunk {
				key, ok := storageKey(e.key)
				if !ok || e.op != jetstream.KeyValuePut {
					continue
				}
				rec, err := decode(key, e.value)
				if err != nil {
					if !yield(nil, err) {
						return
					}
					continue
				}
				if !rec.Live(now) {
					continue
				}
				if !yield(rec, nil) {
					return
				}
			}
			if done {
				return
			}
		}
	}
}

// listScanner returns a scanner of the bucket: a pull consumer on its
// stream when the Store can reach the stream, a KV watch otherwise.
func (s *Store) listScanner(ctx context.Context) (scanner, error) {
	st, err := s.status(ctx, "list")
	if err != nil {
		return nil, err
	}
	s.learnStream(st)
	info := streamInfo(st)
	stream, err := s.bucketStream(ctx, info)
	if err != nil {
		return nil, err
	}
	if stream != nil && info != nil {
		return newConsumerScan(ctx, stream, info, false, &s.bodies)
	}
	return newWatchScan(ctx, s.kv, &s.bodies)
}
