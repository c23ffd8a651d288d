package filestore

import (
	"context"
	"sync"

	"github.com/idem-go/idem"
)

// hub fans out change notifications to the watchers of one directory in this
// process. Stores opened on the same directory share a hub.
type hub struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
}

var hubs sync.Map // canonical directory -> *hub

func hubFor(dir string) *hub {
	if h, ok := hubs.Load(dir); ok {
		return h.(*hub)
	}
	h, _ := hubs.LoadOrStore(dir, &hub{subs: make(map[string]map[chan struct{}]struct{})})
	return h.(*hub)
}

func (h *hub) watch(key string) (chan struct{}, func()) {
	ch := make(chan struct{})
	h.mu.Lock()
	m := h.subs[key]
	if m == nil {
		m = make(map[chan struct{}]struct{})
		h.subs[key] = m
	}
	m[ch] = struct{}{}
	h.mu.Unlock()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			h.mu.Lock()
			defer h.mu.Unlock()
			if m := h.subs[key]; m != nil {
				delete(m, ch)
				if len(m) == 0 {
					delete(h.subs, key)
				}
			}
		})
	}
	return ch, stop
}

// notify closes and forgets every watcher of key.
func (h *hub) notify(key string) {
	h.mu.Lock()
	m := h.subs[key]
	delete(h.subs, key)
	h.mu.Unlock()
	for ch := range m {
		close(ch)
	}
}

// WatchingStore is a Store that also implements idem.Watcher, with
// notification inside this process only. Make one with Store.LocalWatch.
type WatchingStore struct {
	*Store
}

var _ idem.Watcher = (*WatchingStore)(nil)

// LocalWatch returns s as a WatchingStore. Use it when every caller that may
// wait on a key runs in this process (several Guards sharing a directory).
// When other processes use the directory too, give Guards the plain Store:
// a Guard that has a Watcher trusts it to report changes and polls only
// slowly as a safety net, while against a plain Store its waiters poll with
// a short, growing backoff and so notice another process's completion
// sooner.
func (s *Store) LocalWatch() *WatchingStore { return &WatchingStore{Store: s} }

// Watch implements idem.Watcher for waiters in this process: the channel is
// closed after the record for key is claimed, taken over, completed,
// released, deleted or purged by any Store on the same directory in this
// process (heartbeats do not wake it). Changes made by other processes are
// not seen. stop releases the watch; it is also released when ctx ends.
func (w *WatchingStore) Watch(ctx context.Context, key string) (changed <-chan struct{}, stop func(), err error) {
	if err := ValidateKey(key); err != nil {
		return nil, nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	ch, cancel := w.hub.watch(key)
	unhook := context.AfterFunc(ctx, cancel)
	return ch, func() { unhook(); cancel() }, nil
}
