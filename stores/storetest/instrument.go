package storetest

import (
	"context"
	"sync"
	"time"

	"github.com/idem-go/idem/storekit"
)

// Op names a Store method, as counted by Instrumented.
type Op string

// Store operations.
const (
	OpClaim     Op = "claim"
	OpHeartbeat Op = "heartbeat"
	OpComplete  Op = "complete"
	OpRelease   Op = "release"
	OpGet       Op = "get"
	OpDelete    Op = "delete"
)

// Instrumented wraps a Store, counting calls per operation and, for fault
// injection, letting a hook fail or delay any call before (or after) it
// reaches the store. It does not implement storekit.Watcher, whatever it wraps:
// AsStore returns it as a Watcher when the inner store is one.
type Instrumented struct {
	storekit.Store
	mu     sync.Mutex
	counts map[Op]int
	// Before, if set, runs before each call; a non-nil error is returned
	// instead of calling the store.
	Before func(ctx context.Context, op Op, key string) error
	// After, if set, runs after each call with its error and may replace
	// it (to simulate a reply lost after the store applied the write).
	After func(ctx context.Context, op Op, key string, err error) error
}

// Instrument wraps s.
func Instrument(s storekit.Store) *Instrumented {
	return &Instrumented{Store: s, counts: make(map[Op]int)}
}

// Count returns how many calls of op were made.
func (s *Instrumented) Count(op Op) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[op]
}

// Total returns how many calls were made, all operations together.
func (s *Instrumented) Total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.counts {
		n += c
	}
	return n
}

// Reset sets every count to zero.
func (s *Instrumented) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts = make(map[Op]int)
}

func (s *Instrumented) call(ctx context.Context, op Op, key string, f func() error) error {
	s.mu.Lock()
	s.counts[op]++
	before, after := s.Before, s.After
	s.mu.Unlock()
	if before != nil {
		if err := before(ctx, op, key); err != nil {
			return err
		}
	}
	err := f()
	if after != nil {
		err = after(ctx, op, key, err)
	}
	return err
}

// Claim implements storekit.Store.
func (s *Instrumented) Claim(ctx context.Context, req storekit.ClaimRequest) (res storekit.ClaimResult, err error) {
	err = s.call(ctx, OpClaim, req.Key, func() error {
		var e error
		res, e = s.Store.Claim(ctx, req)
		return e
	})
	return res, err
}

// Heartbeat implements storekit.Store.
func (s *Instrumented) Heartbeat(ctx context.Context, key, nonce string, leaseTTL time.Duration) error {
	return s.call(ctx, OpHeartbeat, key, func() error { return s.Store.Heartbeat(ctx, key, nonce, leaseTTL) })
}

// Complete implements storekit.Store.
func (s *Instrumented) Complete(ctx context.Context, key, nonce string, c storekit.Completion) error {
	return s.call(ctx, OpComplete, key, func() error { return s.Store.Complete(ctx, key, nonce, c) })
}

// Release implements storekit.Store.
func (s *Instrumented) Release(ctx context.Context, key, nonce string) error {
	return s.call(ctx, OpRelease, key, func() error { return s.Store.Release(ctx, key, nonce) })
}

// Get implements storekit.Store.
func (s *Instrumented) Get(ctx context.Context, key string) (rec *storekit.Record, err error) {
	err = s.call(ctx, OpGet, key, func() error {
		var e error
		rec, e = s.Store.Get(ctx, key)
		return e
	})
	return rec, err
}

// Delete implements storekit.Store.
func (s *Instrumented) Delete(ctx context.Context, key string) error {
	return s.call(ctx, OpDelete, key, func() error { return s.Store.Delete(ctx, key) })
}

// AsStore returns s as the Guard should see it: s itself, or, when the inner
// store implements storekit.Watcher, s with Watch forwarded to it (watches are
// not counted). A Guard then watches exactly when the inner store can.
func (s *Instrumented) AsStore() storekit.Store {
	if w, ok := s.Store.(storekit.Watcher); ok {
		return &instrumentedWatcher{Instrumented: s, w: w}
	}
	return s
}

type instrumentedWatcher struct {
	*Instrumented
	w storekit.Watcher
}

// Watch implements storekit.Watcher.
func (s *instrumentedWatcher) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return s.w.Watch(ctx, key)
}

// Owner implements storekit.Presence: the inner store's owner token, or ""
// when it has no presence, so that a Guard over s sends the owner the
// inner store would get.
func (s *Instrumented) Owner() string {
	if p, ok := s.Store.(storekit.Presence); ok {
		return p.Owner()
	}
	return ""
}
