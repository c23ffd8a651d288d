package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/idem-go/idem/storekit"
)

// Purge removes the records that expired more than the retention period
// (WithRetention) ago, and temporary files left behind by a crashed write,
// and returns how many records it removed. It is the store's clean-up
// pass, run when called (the background clean-up runs the same pass).
//
// It walks the fan-out directories and lstat(2)s each record file: a file
// whose modification time (the record's ExpiresAt, set by every write) is
// not past the retention is not opened. Each other file is a candidate;
// candidates are removed in batches of storekit.DefaultPurgeBatch, one at
// a time, each under its key's lock after reading the record again, and
// only if that reading says it has expired past the retention on the
// store's clock, the rule every other operation uses. So Purge is safe
// while other goroutines and processes use the store, and a claim waits
// for it at most the removal of one file. Removals are not fsynced (see
// Durability in docs/filestore.md).
//
// Corrupt records are left in place. Failures on single files do not stop
// the pass; they are returned joined, with the count of what was removed.
func (s *Store) Purge(ctx context.Context) (int, error) {
	return s.purge(ctx)
}

// clean is the background clean-up pass: Purge, unless another pass (of
// this or another process) holds the directory's clean-up lock.
func (c *core) clean(ctx context.Context) error {
	ok, err := c.cleanLock.TryLock()
	if err != nil {
		return fmt.Errorf("filestore: clean-up lock: %w", err)
	}
	if !ok {
		c.skipped.Add(1)
		return nil
	}
	c.passes.Add(1)
	_, err = c.purge(ctx)
	err = errors.Join(err, c.purgeOwners())
	if uerr := c.cleanLock.Unlock(); uerr != nil {
		err = errors.Join(err, fmt.Errorf("filestore: clean-up lock: %w", uerr))
	}
	return err
}

// candidate is a file a pass found that may go: a record whose
// modification time says it has expired, or a temporary file.
type candidate struct {
	leaf, name, key string
	temp            bool
}

type purger struct {
	c       *core
	workers int
	batch   []candidate
	removed int
	errs    []error
}

func (c *core) purge(ctx context.Context) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	p := &purger{c: c, workers: removeWorkers, batch: make([]candidate, 0, storekit.DefaultPurgeBatch)}
	tops, err := os.ReadDir(c.dir)
	if err != nil {
		return 0, fmt.Errorf("filestore: purge: %w", err)
	}
	for _, top := range tops {
		if !top.IsDir() || !isFanName(top.Name()) {
			continue
		}
		mid := filepath.Join(c.dir, top.Name())
		leaves, err := os.ReadDir(mid)
		if err != nil {
			p.errs = append(p.errs, fmt.Errorf("filestore: purge: %w", err))
			continue
		}
		for _, l := range leaves {
			if err := ctx.Err(); err != nil {
				p.flush(ctx)
				return p.removed, errors.Join(append(p.errs, err)...)
			}
			if !l.IsDir() || !isLeafName(l.Name()) {
				continue
			}
			p.scan(ctx, filepath.Join(mid, l.Name()))
		}
	}
	p.flush(ctx)
	if err := ctx.Err(); err != nil {
		p.errs = append(p.errs, err)
	}
	return p.removed, errors.Join(p.errs...)
}

// scan adds the candidates of one leaf directory to the batch, removing a
// batch whenever it is full.
func (p *purger) scan(ctx context.Context, leaf string) {
	ents, err := os.ReadDir(leaf)
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("filestore: purge: %w", err))
		return
	}
	now := p.c.nowMs()
	keep := p.c.retention.Milliseconds()
	for _, e := range ents {
		name := e.Name()
		var cand candidate
		switch {
		case strings.HasPrefix(name, tmpPrefix):
			rest := name[len(tmpPrefix):]
			i := strings.LastIndexByte(rest, '-')
			if i <= 0 || ValidateKey(rest[:i]) != nil {
				continue
			}
			cand = candidate{leaf: leaf, name: name, key: rest[:i], temp: true}
		case e.Type().IsRegular() && ValidateKey(name) == nil:
			fi, err := e.Info() // lstat: no open, no read
			if err != nil {
				continue // gone since ReadDir
			}
			if fi.ModTime().UnixMilli()+keep > now {
				continue // live by its modification time
			}
			cand = candidate{leaf: leaf, name: name, key: name}
		default:
			continue
		}
		if p.c.leafOf(cand.key) != leaf {
			continue // not where this store would look for it
		}
		p.batch = append(p.batch, cand)
		if len(p.batch) == cap(p.batch) {
			p.flush(ctx)
		}
	}
}

// removeWorkers is how many candidates of a batch a pass removes at once.
// An unlink waits on the file system's journal (about 0.1 ms here, on
// ext4 with discard), and every claim's fsync beside the pass waits for
// the journal commit that carries the unlinks made since the last one:
// one at a time keeps that share small. Soak runs (TestSoakLifecycle),
// 100k expired among 220k with a probe of claims beside the pass: one at
// a time 13-15 s, the probe's p99 0.6-0.8x of a window without; two at a
// time 14 s, p99 3.8x; four 7.9 s, p99 10.6x.
var removeWorkers = 1

// flush removes the batch's candidates that are still expired, each under
// its key's lock. It does not fsync the directories it removed from: a
// removal lost to a power cut leaves a record that expired past the
// retention, which is what the pass found, and the next pass removes it;
// a write to the same leaf after the removal fsyncs the directory, the
// removal with it. An fsync per leaf would cost the claims beside the
// pass a journal commit each.
func (p *purger) flush(ctx context.Context) {
	var (
		mu   sync.Mutex
		gone []string
	)
	p.parallel(len(p.batch), func(i int) {
		cand := p.batch[i]
		removed, err := p.removeOne(ctx, cand)
		mu.Lock()
		defer mu.Unlock()
		if err != nil && ctx.Err() == nil {
			p.errs = append(p.errs, err)
		}
		if removed && !cand.temp {
			p.removed++
			gone = append(gone, cand.key)
		}
	})
	p.batch = p.batch[:0]
	for _, k := range gone {
		p.c.hub.Notify(k)
	}
}

// parallel calls fn(0) .. fn(n-1) on up to p.workers goroutines, and
// returns when all have returned.
func (p *purger) parallel(n int, fn func(i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, max(p.workers, 1)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				fn(i)
			}
		})
	}
	wg.Wait()
}

// removeOne removes one candidate under its key's lock: a temporary file
// whatever its age, a record only if reading it again says it has expired
// past the retention.
func (p *purger) removeOne(ctx context.Context, cand candidate) (removed bool, err error) {
	if ctx.Err() != nil {
		return false, nil
	}
	err = p.c.locked(ctx, cand.key, func() error {
		if cand.temp {
			// Writers hold the key's lock from creating a temporary file
			// to renaming it, so under it any temporary file of the key
			// is left over from a crash.
			err := os.Remove(filepath.Join(cand.leaf, cand.name))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("filestore: purge %s: %w", cand.name, err)
			}
			removed = err == nil
			return nil
		}
		r, err := p.c.read(cand.key)
		if err != nil || r == nil || !p.c.expired(r) {
			return nil // corrupt, gone or live again
		}
		err = os.Remove(filepath.Join(cand.leaf, cand.name))
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("filestore: purge %s: %w", cand.key, err)
		}
		removed = true
		return nil
	})
	return removed, err
}

func (c *core) expired(r *storekit.Record) bool {
	return r.ExpiresAt+c.retention.Milliseconds() <= c.nowMs()
}
