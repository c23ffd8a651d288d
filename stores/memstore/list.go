package memstore

import (
	"context"
	"iter"

	"github.com/idem-go/idem/storekit"
)

var _ storekit.Lister = (*Store)(nil)

// Records implements storekit.Lister: it yields a copy of every live record,
// one shard at a time. A shard's mutex is held only while the shard's
// record pointers are copied (stored records are replaced, never changed),
// never while the caller handles a record, so a listing holds up the calls
// of one shard for about as long as a clean-up batch.
func (s *Store) Records(ctx context.Context) iter.Seq2[*storekit.Record, error] {
	return func(yield func(*storekit.Record, error) bool) {
		var buf []*storekit.Record
		for i := range s.mem.shards {
			if err := ctx.Err(); err != nil {
				yield(nil, err)
				return
			}
			sh := &s.mem.shards[i]
			buf = buf[:0]
			sh.mu.Lock()
			for _, e := range sh.m {
				buf = append(buf, e.rec)
			}
			sh.mu.Unlock()
			now := s.mem.now().UnixMilli()
			for j, r := range buf {
				buf[j] = nil
				if !r.Live(now) {
					continue
				}
				if !yield(r.Clone(), nil) {
					return
				}
			}
		}
	}
}
