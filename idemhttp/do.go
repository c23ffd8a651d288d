package idemhttp

import (
	"context"
	"net/http"
	"time"

	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

// recordWait is how long a first caller's response waits, once its handler
// has returned, for the outcome to be recorded (or, for a response that is
// not recorded, for the claim to be released). Past it the response is
// ended and the recording goes on in the background: the Guard retries it
// for up to its takeover threshold (see idem.WithTakeoverAfter).
const recordWait = time.Second

// retryAfterRead bounds the store read that tells a 409's Retry-After the
// age of the claim's heartbeat.
const retryAfterRead = 250 * time.Millisecond

// outcome is what a guarded call, or the handler it ran, came to; or,
// with ctx set, the call's request that the handler run under ctx.
type outcome struct {
	v        response
	err      error
	panicked bool
	p        any
	ctx      context.Context
}

// do runs the Guard's Do for a guarded request. Do runs in a goroutine of
// its own; when it calls fn, the handler runs here, in the request's
// goroutine (so a panic in it reaches net/http with its stack, and
// http.ErrAbortHandler does what it should), and fn returns what the
// handler came to. Once the handler has returned, the response waits up to
// recordWait for Do to record it; past that, serve returns and the client
// has its response whatever the store does: Do carries on in the
// background, where the Guard bounds its retries by the takeover
// threshold. ran reports whether the handler ran (then v and err are
// unset: the handler answered).
func (m *Middleware) do(w http.ResponseWriter, r *http.Request, scoped, fp string, body []byte, next http.Handler) (v response, err error, ran bool) {
	// done carries fn's request to run the handler, then Do's outcome;
	// handled, the handler's outcome to fn.
	done := make(chan outcome, 1)
	handled := make(chan outcome, 1)
	go func() {
		var o outcome
		defer func() {
			if p := recover(); p != nil {
				o = outcome{panicked: true, p: p}
			}
			done <- o
		}()
		// Do's completion and release run on a context without the
		// request's cancellation (the Guard's own), so they go on once the
		// response has ended; fn's context ends with the request's.
		o.v, o.err = m.guard.Do(r.Context(), scoped, func(ctx context.Context) (response, error) {
			done <- outcome{ctx: ctx}
			h := <-handled
			return h.v, h.err
		}, idem.Payload(fp))
	}()
	o := <-done
	switch {
	case o.panicked:
		panic(o.p) // a store or the Guard panicked: as if called here
	case o.ctx == nil:
		return o.v, o.err, false
	}
	ctx := o.ctx
	finished := false
	defer func() {
		if !finished {
			// The handler panicked (or called runtime.Goexit): the claim is
			// released, and the panic goes on once it is (or recordWait
			// has passed), so that a retry finds the key free.
			handled <- outcome{err: errHandlerPanicked}
			awaitRecord(done)
		}
	}()
	v, err = m.run(ctx, w, r, body, next)
	finished = true
	handled <- outcome{v: v, err: err}
	awaitRecord(done)
	return response{}, nil, true
}

// awaitRecord waits for done, up to recordWait.
func awaitRecord(done <-chan outcome) {
	t := time.NewTimer(recordWait)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
	}
}

// retryAfter is the Retry-After, in seconds, of a 409 for the key scoped
// in progress: when a retry can expect another answer. The owner of a live
// claim proves it is alive every heartbeat interval; a claim whose owner
// stopped goes stale (and the retry runs the handler) once its heartbeat is
// the takeover threshold old. So: the heartbeat interval, or the time left
// until the claim would go stale if that is sooner (the record's heartbeat
// age read from the store, by this process's clock), rounded up to whole
// seconds, at least 1. A record that is no longer in progress asks for 1.
func (m *Middleware) retryAfter(ctx context.Context, scoped string) int {
	info, _ := guardinfo.Of(m.guard)
	wait, takeover := info.Heartbeat, info.TakeoverAfter
	if sk, err := info.StorageKey(scoped); err == nil {
		// The request's context may have ended (a wait under
		// idem.OnDuplicate(idem.Wait) that ran out): the read has its own.
		gctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), retryAfterRead)
		rec, err := info.Store.Get(gctx, sk)
		cancel()
		switch {
		case err == nil && rec.Status != storekit.StatusInProgress:
			return 1
		case err == nil:
			if rec.TakeoverMs > 0 {
				takeover = time.Duration(rec.TakeoverMs) * time.Millisecond
			}
			age := max(time.Since(time.UnixMilli(rec.HeartbeatAt)), 0)
			wait = min(wait, takeover-age)
		}
	}
	wait = min(wait, takeover)
	secs := int((wait + time.Second - 1) / time.Second)
	return max(secs, 1)
}
