package idem

import (
	"context"
	"time"

	"github.com/idem-go/idem/lease"
)

// waiter is one caller's wait for a live claim on a key to end: woken by
// the store's Watch where it can push, else polling with capped, jittered
// backoff. Whoever waits looks at the record again after every wake.
type waiter struct {
	e        *engine
	sk       string
	started  time.Time // when the wait began; zero before
	changed  <-chan struct{}
	stop     func() // stops the watch, nil when none
	watchErr bool   // the store's Watch failed: this wait polls
	backoff  time.Duration
	limit    time.Duration // if positive, no wait is longer
}

func (e *engine) newWaiter(sk string) *waiter {
	return &waiter{e: e, sk: sk, backoff: pollMin}
}

// begin reports the start of the wait, once; it returns true the first
// time.
func (w *waiter) begin(ctx context.Context, attempt int64) bool {
	if !w.started.IsZero() {
		return false
	}
	w.started = time.Now()
	w.e.observe(ctx, Event{Kind: EventWait, StorageKey: w.sk, Attempt: attempt})
	return true
}

// done reports the end of the wait, if there was one.
func (w *waiter) done(ctx context.Context, attempt int64) {
	if !w.started.IsZero() {
		w.e.observe(ctx, Event{Kind: EventWaitDone, StorageKey: w.sk, Attempt: attempt, Duration: time.Since(w.started)})
	}
}

// wait blocks until the record may have changed or it is time to look
// again. It returns the waiter's error when ctx ends first.
//
// A Watch that fails is not tried again by this wait: it polls with
// backoff until it ends, and the next wait of the key tries Watch afresh.
// Retrying on every poll would double the store traffic of a wait exactly
// when the store is in trouble.
func (w *waiter) wait(ctx context.Context, attempt int64) error {
	if w.e.watcher != nil && w.stop == nil && !w.watchErr {
		ch, stop, err := w.e.watcher.Watch(ctx, w.sk)
		if err == nil {
			w.changed, w.stop = ch, stop
			return nil // look again now that a change cannot be missed
		}
		w.watchErr = true
	}
	delay := lease.Jitter(w.backoff)
	if w.changed != nil {
		delay = lease.Jitter(w.e.safetyPoll())
	} else {
		w.backoff = min(2*w.backoff, w.e.pollMax())
	}
	if w.limit > 0 {
		delay = min(delay, w.limit)
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-w.changed:
		w.close()
	case <-t.C:
	case <-ctx.Done():
		w.e.observe(ctx, Event{Kind: EventInProgress, StorageKey: w.sk, Attempt: attempt, Duration: time.Since(w.started)})
		return waitCancelled(ctx)
	}
	return nil
}

// close stops the watch, if any.
func (w *waiter) close() {
	if w.stop != nil {
		w.stop()
		w.stop, w.changed = nil, nil
	}
}

const pollMin = 5 * time.Millisecond

// pollMax caps the polling interval of a waiter on a store that cannot push.
func (e *engine) pollMax() time.Duration {
	return min(max(e.takeover/8, 20*time.Millisecond), time.Second)
}

// safetyPoll is how often a waiter on a pushing store looks anyway: a
// crashed owner publishes nothing, so staleness is found by looking. On a
// store that knows when an owner is gone (storekit.Presence), looking is
// what finds a dead owner's claim (the claim that looks takes it over), so
// a waiter looks at least every second: a crash costs a waiter a second,
// not the takeover threshold.
func (e *engine) safetyPoll() time.Duration {
	limit := 5 * time.Second
	if e.presence {
		limit = time.Second
	}
	return min(max(e.takeover/4, 50*time.Millisecond), limit)
}

// waits are a leader's waiters: on the call's key under the active
// secret, and on a key under a previous secret where a call is in
// progress (nil until there is one).
type waits struct {
	e            *engine
	active, prev *waiter
}

// done tells both waiters that the key is decided at attempt.
func (ws *waits) done(ctx context.Context, attempt int64) {
	ws.active.done(ctx, attempt)
	if ws.prev != nil {
		ws.prev.done(ctx, attempt)
	}
}

// on returns the waiter on key: the active one, or one on key under a
// previous secret (the one there already when it waits on key, else a new
// one, and the old one is closed).
func (ws *waits) on(key string) *waiter {
	if key == ws.active.sk {
		return ws.active
	}
	if ws.prev != nil && ws.prev.sk == key {
		return ws.prev
	}
	if ws.prev != nil {
		ws.prev.close()
	}
	ws.prev = ws.e.newWaiter(key)
	return ws.prev
}

// close closes both waiters.
func (ws *waits) close() {
	ws.active.close()
	if ws.prev != nil {
		ws.prev.close()
	}
}
