package filestore

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"path/filepath"

	"github.com/idem-go/idem/storekit"
)

var _ storekit.Lister = (*Store)(nil)

// Records implements storekit.Lister. It walks the whole directory, one leaf
// at a time (a leaf holds about 1/4,096 of the records), and reads every
// record file without a lock (a record file is replaced by rename, never
// written in place, so a read sees a whole record). A record is judged by
// its content, as Do judges it, never by the file's modification time: a
// file restored from a backup or copied without its times is listed if
// its record is live, and reported if it is corrupt. A file removed
// between the directory read and its own read is skipped.
func (s *Store) Records(ctx context.Context) iter.Seq2[*storekit.Record, error] {
	return func(yield func(*storekit.Record, error) bool) {
		tops, err := os.ReadDir(s.dir)
		if err != nil {
			yield(nil, fmt.Errorf("filestore: list: %w", err))
			return
		}
		for _, top := range tops {
			if !top.IsDir() || !isFanName(top.Name()) {
				continue
			}
			mid := filepath.Join(s.dir, top.Name())
			leaves, err := os.ReadDir(mid)
			if err != nil {
				yield(nil, fmt.Errorf("filestore: list: %w", err))
				return
			}
			for _, l := range leaves {
				if !l.IsDir() || !isLeafName(l.Name()) {
					continue
				}
				if !s.listLeaf(ctx, filepath.Join(mid, l.Name()), yield) {
					return
				}
			}
		}
	}
}

// listLeaf yields the live records of one leaf directory; false means stop.
func (s *Store) listLeaf(ctx context.Context, leaf string, yield func(*storekit.Record, error) bool) bool {
	if err := ctx.Err(); err != nil {
		yield(nil, err)
		return false
	}
	ents, err := os.ReadDir(leaf)
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	if err != nil {
		yield(nil, fmt.Errorf("filestore: list: %w", err))
		return false
	}
	for _, e := range ents {
		name := e.Name()
		if !e.Type().IsRegular() || ValidateKey(name) != nil || s.leafOf(name) != leaf {
			continue
		}
		r, err := s.read(name)
		if err != nil {
			if !yield(nil, err) {
				return false
			}
			continue
		}
		if r == nil || !r.Live(s.nowMs()) {
			continue
		}
		if !yield(r, nil) {
			return false
		}
	}
	return true
}
