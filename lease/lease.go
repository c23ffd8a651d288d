// Package lease holds the mechanics of a time-limited lease on a store:
// random tokens, jittered backoff, and a Refresher that keeps a lease
// alive while work runs and cuts the work off before the lease could
// expire unnoticed. A holder implements Holder (Refresh, Lost, Lapsed) and
// runs its work under a Refresher:
//
//	token := lease.Token() // the lease's owner token, 128 random bits
//	sent := time.Now()
//	valid, err := acquire(ctx, token) // the holder's own store request
//	ctx, cancel := context.WithCancelCause(ctx)
//	var r lease.Refresher
//	r.Start(ctx, cancel, sent, valid, holder, lease.Config{Interval: 5 * time.Second, Margin: time.Second})
//	err = work(ctx) // cancelled, with the Holder's cause, if the lease is lost or lapses
//	lost := r.Stop()
//
// A Guard's claim (package idem) and an isr Coordinator's lease (module
// github.com/idem-go/idem/isr) are built on it; a store or lease
// implementation outside this repository may use it too.
//
// It is a public package of the core module so that modules released
// separately share it through a stable API rather than an internal package.
// It depends on the standard library only.
package lease

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	mathrand "math/rand/v2"
	"sync"
	"time"
)

// Token returns 128 random bits in hex: a lease token or claim nonce that no
// other holder will ever draw.
func Token() string {
	return RandomHex(16)
}

// RandomHex returns n random bytes in hex.
func RandomHex(n int) string {
	var small [48]byte // a nonce's 16 bytes and their hex, without an allocation
	var b, h []byte
	if 3*n <= len(small) {
		b, h = small[:n], small[n:3*n]
	} else {
		b, h = make([]byte, n), make([]byte, 2*n)
	}
	_, _ = rand.Read(b) // crypto/rand.Read never returns an error
	hex.Encode(h, b)
	return string(h)
}

// Jitter returns a duration drawn uniformly from [d/2, d], so that callers
// backing off together do not retry together.
func Jitter(d time.Duration) time.Duration {
	if d <= 0 {
		return 0
	}
	return d/2 + mathrand.N(d/2+1)
}

// Sleep waits for d, or until ctx ends, in which case it returns ctx's
// cause.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-t.C:
		return nil
	}
}

// A Holder holds a lease that a Refresher keeps alive: it refreshes the
// lease, tells which refresh errors mean the lease is gone, and says what
// the work is cancelled with when the lease lapses. (An interface, not
// functions, so that a holder allocates nothing to be refreshed.)
type Holder interface {
	// Refresh refreshes the lease once. On success it reports for how long
	// the lease is now valid, counted from the moment Refresh was called
	// (the store counts from no earlier than that).
	Refresh(ctx context.Context) (valid time.Duration, err error)

	// Lost tells a failed refresh that means the lease is gone for good
	// from a transient one. For the former it returns the cause to cancel
	// the work with, and refreshing ends; for the latter nil, and the next
	// interval tries again while the lapse timer runs on.
	Lost(err error) (cause error)

	// Lapsed is called when the lapse deadline passes with no successful
	// refresh: since is the time since the last successful refresh (or the
	// acquisition) was sent, lastErr the error of the last refresh if it
	// failed. It returns the cause the work is cancelled with; it is called
	// before the cancel, so what it reports is known by the time the work
	// sees its context end.
	Lapsed(since time.Duration, lastErr error) (cause error)
}

// Config says how often a Refresher refreshes a lease and what it reports.
type Config struct {
	// Interval is the time from one refresh's send to the next one's. Each
	// refresh's context is also bounded by it, so a hanging refresh does
	// not hold up the next. Required (> 0).
	Interval time.Duration

	// Margin is how long before the lease's validity ends the work is cut
	// off, leaving room for the work to notice.
	Margin time.Duration

	// OnRefresh, if set, is called after each successful refresh with the
	// time left until the new lapse deadline.
	OnRefresh func(left time.Duration)

	// OnError, if set, is called with each transient refresh error.
	OnError func(err error)
}

// A Refresher refreshes a lease every Interval while work runs and cancels
// the work when the lease is lost or about to lapse. It is a pair of
// timers, not a goroutine, so work that ends within one interval costs no
// refresh at all (and one timer: the lapse timer is armed with the first
// refresh, when the deadline is later than that).
//
// The lapse deadline is the send time of the last successful refresh plus
// the validity it reported, minus the margin. Counting from the send, not
// the reply, matters: the store started the new validity no earlier than
// the send, and a slow reply must not push the deadline past the lease's
// real end. The deadline has a timer of its own, so a refresh that hangs
// does not delay it.
type Refresher struct {
	h      Holder
	cfg    Config
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu     sync.Mutex
	next   *time.Timer // sends the next refresh
	lapse  *time.Timer // fires at the lapse deadline
	lastOK time.Time   // send time of the last successful refresh
	// deadline is the current lapse deadline. The lapse timer checks it:
	// a refresh that succeeds just as the timer fires resets the timer
	// after it has already fired, and must not be overruled by it.
	deadline time.Time
	lastErr  error // error of the last refresh, nil after a success
	stopped  bool
	lost     bool
	busy     sync.WaitGroup // a refresh in flight
}

// Start starts refreshing h's lease, which was acquired (or last
// refreshed) by a request sent at since and is valid for valid from then.
// Refreshes use ctx; cancel cancels the work. r must be a zero Refresher
// (one Start per Refresher, so that a holder can embed it), and Stop must be
// called when the work ends.
func (r *Refresher) Start(ctx context.Context, cancel context.CancelCauseFunc, since time.Time, valid time.Duration, h Holder, cfg Config) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h, r.cfg, r.ctx, r.cancel = h, cfg, ctx, cancel
	r.lastOK, r.deadline = since, since.Add(valid-cfg.Margin)
	// The lapse timer is armed by the first refresh when the deadline
	// comes after it (work that ends within one interval then costs one
	// timer), and here when it does not.
	if left := valid - cfg.Margin - time.Since(since); left <= cfg.Interval {
		r.lapse = time.AfterFunc(left, r.lapsed)
	}
	// The next refresh is due one interval after since, not after Start: a
	// lease whose acquisition reply was slow has less of its validity left.
	r.next = time.AfterFunc(max(cfg.Interval-time.Since(since), 0), r.refresh)
}

// Valid reports whether the lease is held for certain now: started, not
// stopped, not found lost, and its lapse deadline (the send time of the last
// successful refresh, or of the acquisition, plus its validity, minus the
// margin) still ahead. Work that must not begin under a lease that may have
// lapsed checks it right before it begins.
func (r *Refresher) Valid() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.next != nil && !r.stopped && !r.lost && time.Now().Before(r.deadline)
}

// Stop ends the refreshing, waits for a refresh in flight, and reports
// whether the lease was found lost (a Refresher never started reports
// false). The lapse timer is stopped too, so the work is not cancelled
// after Stop returns.
func (r *Refresher) Stop() (lost bool) {
	r.mu.Lock()
	r.stopped = true
	if r.next != nil { // nil: never started
		r.next.Stop()
	}
	if r.lapse != nil {
		r.lapse.Stop()
	}
	r.mu.Unlock()
	r.busy.Wait()
	return r.lost
}

// Halt stops the refreshing as Stop does, but does not wait for a refresh
// in flight: it reports whether the lease was found lost so far. Work that
// has ended and must now write its outcome uses it, so that a refresh
// whose reply is slow does not hold the write back past the lease's end
// (when another holder could take over). A refresh still in flight is
// ignored when it returns: it cancels nothing, and a store refuses it
// once the lease was released or completed.
func (r *Refresher) Halt() (lost bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stopped = true
	if r.next != nil {
		r.next.Stop()
	}
	if r.lapse != nil {
		r.lapse.Stop()
	}
	return r.lost
}

func (r *Refresher) lapsed() {
	r.mu.Lock()
	if r.stopped {
		r.mu.Unlock()
		return
	}
	if now := time.Now(); now.Before(r.deadline) {
		// A refresh succeeded while this timer fired, and reset it.
		r.mu.Unlock()
		return
	}
	since, lastErr := time.Since(r.lastOK), r.lastErr
	r.mu.Unlock()
	r.cancel(r.h.Lapsed(since, lastErr))
}

func (r *Refresher) refresh() {
	r.mu.Lock()
	if r.stopped || r.ctx.Err() != nil {
		r.mu.Unlock()
		return
	}
	if r.lapse == nil {
		r.lapse = time.AfterFunc(time.Until(r.deadline), r.lapsed)
	}
	r.busy.Add(1)
	r.mu.Unlock()
	defer r.busy.Done()

	sent := time.Now()
	rctx, rcancel := context.WithTimeout(r.ctx, r.cfg.Interval)
	valid, err := r.h.Refresh(rctx)
	rcancel()
	if err != nil {
		if cause := r.h.Lost(err); cause != nil {
			r.mu.Lock()
			r.lost = true
			stopped := r.stopped
			r.mu.Unlock()
			if !stopped {
				r.cancel(cause)
			}
			return
		}
		r.mu.Lock()
		r.lastErr = err
		r.mu.Unlock()
		if r.cfg.OnError != nil {
			r.cfg.OnError(err)
		}
	} else {
		left := valid - r.cfg.Margin - time.Since(sent)
		r.mu.Lock()
		r.lastOK, r.lastErr = sent, nil
		r.deadline = sent.Add(valid - r.cfg.Margin)
		if !r.stopped {
			r.lapse.Reset(left)
		}
		r.mu.Unlock()
		if r.cfg.OnRefresh != nil {
			r.cfg.OnRefresh(left)
		}
	}
	r.mu.Lock()
	if !r.stopped {
		r.next.Reset(r.cfg.Interval - time.Since(sent)) // one interval from send to send
	}
	r.mu.Unlock()
}
