package natsstore

import (
	"context"
	"sync"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/nats-io/nats.go/jetstream"
)

// ownerWatchEvery is how often a watch of another process's in-progress
// claim asks its owner's presence subject, so that a waiter is woken
// when the owner dies although the record does not change.
const ownerWatchEvery = time.Second

// Watch implements storekit.Watcher with a KV watch of the key: the
// channel is closed at the first change of the record after Watch
// returned, or when ctx ends or the watch fails, so a waiter never sleeps
// through a change; stop ends the watch. A Store with presence also
// reads the record the watch starts from (it comes with the watch, no
// extra round trip) and, while it is an in-progress claim with an owner,
// asks that owner's subject every ownerWatchEvery: the channel is closed
// too when the owner is gone, so the waiter claims again and takes over.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	wctx, cancel := context.WithCancel(ctx)
	var opts []jetstream.WatchOpt
	if s.nc == nil {
		opts = append(opts, jetstream.UpdatesOnly())
	}
	w, err := s.kv.Watch(wctx, kvKey(key), opts...)
	if err != nil {
		cancel()
		return nil, nil, &storekit.StoreError{Op: "watch", Err: err}
	}
	changed := make(chan struct{})
	go func() {
		defer close(changed)
		initial := s.nc != nil // entries before the nil marker are the current record
		var seen uint64        // the newest revision the watch started from
		var gone <-chan struct{}
		for {
			select {
			case e, ok := <-w.Updates():
				switch {
				case !ok:
					return
				case e == nil: // the end of the initial values: keep waiting
					initial = false
				case initial:
					seen = max(seen, e.Revision())
					if gone == nil {
						gone = s.watchOwner(wctx, key, e)
					}
				case e.Revision() <= seen:
					// The record the watch started from, delivered again
					// (the watch's consumer was reset, as after a stream
					// leader change): not a change.
				default:
					return
				}
			case <-gone:
				return
			case <-wctx.Done():
				return
			}
		}
	}()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			_ = w.Stop()
		})
	}
	return changed, stop, nil
}

// watchOwner returns a channel closed when the owner of e's record, an
// in-progress claim, is known gone; nil (never ready) when e is no such
// record. It asks every ownerWatchEvery until ctx ends.
func (s *Store) watchOwner(ctx context.Context, key string, e jetstream.KeyValueEntry) <-chan struct{} {
	if e.Operation() != jetstream.KeyValuePut {
		return nil
	}
	rec, err := decode(key, e.Value())
	if err != nil || rec.Status != storekit.StatusInProgress || !isToken(storekit.OwnerToken(rec.Owner)) {
		return nil
	}
	token := storekit.OwnerToken(rec.Owner)
	gone := make(chan struct{})
	go func() {
		t := time.NewTicker(ownerWatchEvery)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				if s.ownerGone(ctx, token) {
					close(gone)
					return
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return gone
}
