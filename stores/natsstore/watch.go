package natsstore

import (
	"context"
	"sync"

	"github.com/idem-go/idem/storekit"

	"github.com/nats-io/nats.go/jetstream"
)

// Watch implements storekit.Watcher with a KV watch of the key (updates only):
// the channel is closed at the first change of the record after Watch
// returned, or when ctx ends or the watch fails, so a waiter never sleeps
// through a change; stop ends the watch.
func (s *Store) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	wctx, cancel := context.WithCancel(ctx)
	w, err := s.kv.Watch(wctx, kvKey(key), jetstream.UpdatesOnly())
	if err != nil {
		cancel()
		return nil, nil, &storekit.StoreError{Op: "watch", Err: err}
	}
	changed := make(chan struct{})
	go func() {
		defer close(changed)
		for {
			select {
			case e, ok := <-w.Updates():
				if !ok || e != nil {
					return
				}
				// nil marks the end of the initial values: keep waiting.
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
