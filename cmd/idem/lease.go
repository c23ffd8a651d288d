package main

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/idem-go/idem"
)

// errLeaseExpired stops a command whose claim could not be refreshed for so
// long that another run may already have taken it over.
var errLeaseExpired = errors.New("the claim could not be refreshed in time")

// isLapse reports whether cause is the Guard's own notice that the claim
// went unrefreshed too long (an *idem.LapseError).
func isLapse(cause error) bool {
	var le *idem.LapseError
	return errors.As(cause, &le)
}

// leaseLapsed reports whether a command was stopped because its claim could
// not be refreshed, as noticed by this command or by the Guard.
func leaseLapsed(cause error) bool {
	return errors.Is(cause, errLeaseExpired) || isLapse(cause)
}

// leaseStore remembers when the claim of this run was last proved alive: the
// start of the last claim or heartbeat that succeeded. The store may have
// applied it at any moment after that, never before, so the claim is fresh
// in the store's eyes until at least that time plus the takeover threshold.
type leaseStore struct {
	idem.Store
	mu      sync.Mutex
	lastOK  time.Time
	lastErr error // of the last heartbeat that failed
}

// wrapLease returns st wrapped in a leaseStore, keeping its Watcher.
func wrapLease(st idem.Store) (idem.Store, *leaseStore) {
	ls := &leaseStore{Store: st}
	if w, ok := st.(idem.Watcher); ok {
		return &watchingLeaseStore{leaseStore: ls, w: w}, ls
	}
	return ls, ls
}

type watchingLeaseStore struct {
	*leaseStore
	w idem.Watcher
}

func (s *watchingLeaseStore) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return s.w.Watch(ctx, key)
}

func (s *leaseStore) mark(start time.Time) {
	s.mu.Lock()
	if start.After(s.lastOK) {
		s.lastOK = start
	}
	s.mu.Unlock()
}

// heartbeatErr returns the error of the last heartbeat that failed.
func (s *leaseStore) heartbeatErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastErr
}

func (s *leaseStore) last() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastOK
}

// Validate passes on the wrapped store's validation.
func (s *leaseStore) Validate() error {
	if v, ok := s.Store.(interface{ Validate() error }); ok {
		return v.Validate()
	}
	return nil
}

func (s *leaseStore) Claim(ctx context.Context, req idem.ClaimRequest) (idem.ClaimResult, error) {
	start := time.Now()
	res, err := s.Store.Claim(ctx, req)
	if err == nil && res.Outcome != idem.Existing {
		s.mark(start)
	}
	return res, err
}

func (s *leaseStore) Heartbeat(ctx context.Context, key, nonce string, leaseTTL time.Duration) error {
	start := time.Now()
	err := s.Store.Heartbeat(ctx, key, nonce, leaseTTL)
	if err == nil {
		s.mark(start)
	} else {
		s.mu.Lock()
		s.lastErr = err
		s.mu.Unlock()
	}
	return err
}

// watchLease returns a context derived from ctx that is cancelled with
// errLeaseExpired once limit has passed since the last refresh of the claim
// that succeeded, and a function that stops watching. A run whose heartbeats
// keep failing (the store is unreachable from this host only) thus stops its
// command before another host can take the claim over and run it too.
func watchLease(ctx context.Context, ls *leaseStore, limit time.Duration) (context.Context, func()) {
	wctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	every := max(min(limit/10, time.Second), 10*time.Millisecond)
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
				if time.Since(ls.last()) >= limit {
					cancel(errLeaseExpired)
					return
				}
			}
		}
	}()
	return wctx, func() {
		cancel(nil)
		<-done
	}
}
