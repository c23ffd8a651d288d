package filestore

import (
	"context"
	"sync"

	"github.com/idem-go/idem/storekit"
)

// hubs holds the watches of each directory in this process
// (canonical directory -> *storekit.Watchers): Stores opened on the same
// directory share them, so a change made through one wakes the waiters of
// another.
var hubs sync.Map

func hubFor(dir string) *storekit.Watchers {
	if h, ok := hubs.Load(dir); ok {
		return h.(*storekit.Watchers)
	}
	h, _ := hubs.LoadOrStore(dir, &storekit.Watchers{})
	return h.(*storekit.Watchers)
}

// WatchingStore is a Store that also implements storekit.Watcher, with
// notification inside this process only. Make one with Store.LocalWatch.
type WatchingStore struct {
	*Store
}

var _ storekit.Watcher = (*WatchingStore)(nil)

// LocalWatch returns s as a WatchingStore. Use it when every caller that may
// wait on a key runs in this process (several Guards sharing a directory).
// When other processes use the directory too, give Guards the plain Store:
// a Guard that has a Watcher trusts it to report changes and polls only
// slowly as a safety net, while against a plain Store its waiters poll with
// a short, growing backoff and so notice another process's completion
// sooner.
func (s *Store) LocalWatch() *WatchingStore { return &WatchingStore{Store: s} }

// Watch implements storekit.Watcher for waiters in this process: the channel is
// closed after the record for key is claimed, taken over, completed,
// released, deleted or purged by any Store on the same directory in this
// process (heartbeats do not wake it). Changes made by other processes are
// not seen. stop releases the watch; it is also released when ctx ends.
func (w *WatchingStore) Watch(ctx context.Context, key string) (changed <-chan struct{}, stop func(), err error) {
	if err := ValidateKey(key); err != nil {
		return nil, nil, err
	}
	return w.hub.Watch(ctx, key)
}
