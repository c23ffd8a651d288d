package storekit

import (
	"context"
	"sync"
	"sync/atomic"
)

// Watchers keeps the watches of a store's keys in this process and wakes
// them: a store that knows when it changes a record (every write goes
// through it, as with Locked's Changed hook) implements Watcher with
// Watch and calls Notify after each change. The zero value is ready to
// use; it is safe for concurrent use, and Notify may be called while the
// store holds its own locks.
type Watchers struct {
	mu   sync.Mutex
	subs map[string]map[chan struct{}]struct{}
	// keys is len(subs), written under mu: Notify reads it without mu, so
	// the notifications of a store nobody watches (a clean-up removing
	// 1M records, every write) take no lock shared by the whole store.
	keys atomic.Int64
}

// Watch is Watcher's Watch for key: the channel is closed by the next
// Notify(key). stop ends the watch and frees it, and may be called more
// than once; the end of ctx does the same (the channel is then never
// closed). A ctx that has already ended is its error. Watch does not check
// key: the store does, as for its other calls.
func (w *Watchers) Watch(ctx context.Context, key string) (changed <-chan struct{}, stop func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	ch := make(chan struct{})
	w.mu.Lock()
	if w.subs == nil {
		w.subs = make(map[string]map[chan struct{}]struct{})
	}
	set := w.subs[key]
	if set == nil {
		set = make(map[chan struct{}]struct{})
		w.subs[key] = set
	}
	set[ch] = struct{}{}
	w.keys.Store(int64(len(w.subs)))
	w.mu.Unlock()
	remove := func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		if set := w.subs[key]; set != nil {
			delete(set, ch)
			if len(set) == 0 {
				delete(w.subs, key)
				w.keys.Store(int64(len(w.subs)))
			}
		}
	}
	unhook := context.AfterFunc(ctx, remove)
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			unhook()
			remove()
		})
	}, nil
}

// Notify wakes every watch of key (closes its channel) and forgets it.
// When no key is watched it takes no lock. A watch registered before the
// change that Notify reports is woken: the store's lock orders the
// watcher's later read of the record and the change, and keys is set
// before that read.
func (w *Watchers) Notify(key string) {
	if w.keys.Load() == 0 {
		return
	}
	w.mu.Lock()
	set := w.subs[key]
	delete(w.subs, key)
	w.keys.Store(int64(len(w.subs)))
	w.mu.Unlock()
	for ch := range set {
		close(ch)
	}
}

// NotifyAll wakes every watch of every key and forgets them: a store whose
// change feed was interrupted (a dropped subscription or listening
// connection) may have missed changes of any key.
func (w *Watchers) NotifyAll() {
	w.mu.Lock()
	subs := w.subs
	w.subs = nil
	w.keys.Store(0)
	w.mu.Unlock()
	for _, set := range subs {
		for ch := range set {
			close(ch)
		}
	}
}

// Len returns how many watches of key are registered, for tests.
func (w *Watchers) Len(key string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.subs[key])
}
