package idem

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/lease"
)

// claim is one claim this process holds on a storage key, for a call or
// for a step: the record as claimed, the heartbeat that keeps it alive
// while its work runs, and the transitions that end it (complete, fail,
// release, abandon), each conditioned on its nonce. It owns its state, as
// singleflight's call does, so nothing threads keys, nonces and attempts
// from function to function.
type claim struct {
	e    *engine
	ctx  context.Context // the caller's context
	bg   context.Context // ctx without its cancellation: writes that must go out
	sk   string
	ph   string           // the call's payload hash
	rec  *storekit.Record // the record as claimed: its nonce and attempt
	sent time.Time        // when the claim was sent (the store's HeartbeatAt is no earlier)
	took bool             // the claim took over a stale one, or one whose owner is gone
	gone bool             // took: the claim's owner was known gone (ClaimResult.OwnerGone)
	f    *flight          // the flight it runs for; nil for a step
	step bool             // a step's claim (not a call's)
	call *stepCall        // a call's steps, once the claim is held; nil for a step
	// otx, when set, holds the claim inside a transaction of the store
	// (storekit.TxClaimer): nothing is written until its commit, so the
	// claim has no heartbeat, cannot lapse, and has nothing to release.
	otx storekit.OpenTx
	// refused is set when the commit of the claim's work was refused
	// (storekit.ErrLostOwnership): nothing of it committed.
	refused bool

	start  time.Time               // when the work began
	fctx   context.Context         // the work's context
	cancel context.CancelCauseFunc // cancels fctx
	hb     lease.Refresher         // started by begin; c is its Holder

	mu      sync.Mutex
	stopped bool   // the heartbeat was stopped
	lost    bool   // the heartbeat found the claim taken over
	ended   bool   // end ran
	ran     bool   // the work began under the claim
	onLapse func() // called when the claim lapses (the flight lets go of it); nil if none
}

// maxUnheld is how many claims in a row a caller makes that lapse before
// its work could begin (each reply later than the takeover threshold
// allows) before it gives up with an error instead of claiming again.
const maxUnheld = 3

// maxRaced is how many claims in a row held in a transaction (claim.otx)
// a caller makes whose record another caller wrote first before it
// returns the refusal instead of looking at the key again.
const maxRaced = 3

// Holding a claim (fn never starts under a
// claim that may have lapsed).
//
// A claim is held from the moment its reply arrives: hold starts its
// heartbeat then, counted from when the claim was SENT (the store wrote
// HeartbeatAt no earlier), so everything between the claim and the work
// (rotation lookups, settling, waits) runs under the heartbeat, and a slow
// reply shortens the lease instead of stretching it. Right before the work
// begins, startWork checks that the heartbeat's lapse deadline (the send
// time of the last successful claim or heartbeat, plus the takeover
// threshold, minus half a heartbeat interval) is still ahead and that no
// heartbeat was refused. Why that is enough: another caller can take the
// claim over only once the store sees a heartbeat at least the threshold
// old; the store's HeartbeatAt is no earlier than the send of the request
// that wrote it; so until that send plus the threshold nobody can have taken
// it over, and from then on the heartbeat keeps the claim or cuts the work
// off (its context is cancelled at the lapse deadline, before a takeover
// is possible). A claim whose deadline has passed before the work begins is
// dropped (released, if it is still ours) and the caller claims again; a
// caller whose claims lapse maxUnheld times in a row gets an error, and
// nothing ran. The same holds for each step's claim.

// hold starts holding the claim: the work's context (parent's values, the
// fencing token, cancelled when the claim is lost or may lapse) and the
// heartbeat. A call's parent (see callContext) carries the fencing token
// and the call's steps already.
func (c *claim) hold(parent context.Context) {
	if cc, ok := parent.(*callCtx); ok {
		c.call = &cc.call
	} else {
		parent = context.WithValue(parent, fencingKey{}, c.rec.Attempt)
	}
	c.fctx, c.cancel = context.WithCancelCause(parent)
	if c.otx == nil {
		c.heartbeat()
	}
}

// startWork reports whether the claim is certainly still held, and if so
// marks the work begun. False means the claim may have lapsed: the work
// must not begin (drop the claim and claim again).
func (c *claim) startWork() bool {
	if c.cancel == nil || c.fctx.Err() != nil || (c.otx == nil && !c.hb.Valid()) {
		return false
	}
	c.mu.Lock()
	c.ran = true
	c.mu.Unlock()
	c.start = time.Now()
	return true
}

// drop ends a claim whose work will not run under it (it may have lapsed,
// or settling gave it up): its heartbeat is stopped and it is released if
// it is still ours.
func (c *claim) drop() {
	c.end()
	if c.otx != nil {
		c.otx.Rollback()
		return
	}
	_ = c.release()
}

// raced reports whether the claim, held in a transaction, had its commit
// refused because another caller wrote the key's record first: nothing of
// the claim or its work committed.
func (c *claim) raced() bool { return c.otx != nil && c.refused }

// unheld is the error of a caller whose claims lapsed maxUnheld times in a
// row before its work could begin: nothing ran, so it may try again.
func (c *claim) unheld() error {
	return &StoreError{Op: "claim", Err: fmt.Errorf("%d claims in a row lapsed before the work could begin (the last reply came %v after its request; the takeover threshold is %v): %w",
		maxUnheld, time.Since(c.sent).Round(time.Millisecond), c.e.takeover, &lapseError{Since: time.Since(c.sent).Round(time.Millisecond)})}
}

// tryClaim sends one Claim for sk. It returns the claim when this caller
// got it (claimed or took over), or the live record that stands in its way.
func (e *engine) tryClaim(ctx context.Context, sk, ph string) (c *claim, existing *storekit.Record, err error) {
	sent := time.Now()
	res, err := e.store.Claim(ctx, e.claimRequest(sk, ph))
	if err != nil {
		return nil, nil, storeErr("claim", err)
	}
	return e.claimed(ctx, sk, ph, res, sent)
}

// claimRequest is the request of a claim of sk, with a fresh nonce.
func (e *engine) claimRequest(sk, ph string) storekit.ClaimRequest {
	return storekit.ClaimRequest{
		Key: sk, Nonce: lease.Token(), PayloadHash: ph, LeaseTTL: e.lease, TakeoverAfter: e.takeover,
		Owner: e.owner, Tenant: e.tenant, Scope: e.scope,
	}
}

// claimed turns a claim's result, sent at sent, into the claim this
// caller got, or the record that stands in its way.
func (e *engine) claimed(ctx context.Context, sk, ph string, res storekit.ClaimResult, sent time.Time) (*claim, *storekit.Record, error) {
	if res.Record == nil {
		return nil, nil, &StoreError{Op: "claim", Err: errors.New("store returned no record")}
	}
	if res.Outcome == storekit.Existing {
		return nil, res.Record, nil
	}
	c := &claim{e: e, ctx: ctx, bg: context.WithoutCancel(ctx), sk: sk, ph: ph, rec: res.Record, sent: sent, took: res.Outcome == storekit.TookOver, gone: res.OwnerGone}
	return c, nil, nil
}

// announce reports the claim (claim or takeover).
func (c *claim) announce(claimKind, takeoverKind EventKind) {
	if c.took {
		c.observe(takeoverKind, nil)
		return
	}
	c.observe(claimKind, nil)
}

// observe reports an event of the claim.
func (c *claim) observe(kind EventKind, err error) {
	ev := Event{Kind: kind, StorageKey: c.sk, Attempt: c.rec.Attempt, Err: err, OwnerGone: c.gone && (kind == EventTakeover || kind == EventStepRun)}
	if !c.start.IsZero() && (kind == EventComplete || kind == EventFailure || kind == EventLostOwnership) {
		ev.Duration = time.Since(c.start)
	}
	c.e.observe(c.ctx, ev)
}

// stopHeartbeat stops the heartbeat (once) and reports whether it found the
// claim taken over. The work's context stays as it is.
func (c *claim) stopHeartbeat() (lost bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.stopped {
		c.stopped = true
		// Halt, not Stop: a heartbeat whose reply is slow must not hold the
		// outcome's write back until the claim may be taken over.
		c.lost = c.hb.Halt()
	}
	return c.lost
}

// end stops the heartbeat and cancels the work's context; it reports
// whether the claim was lost. The heartbeat is stopped before any release
// or completion, so that it cannot revive the claim.
func (c *claim) end() (lost bool) {
	lost = c.stopHeartbeat()
	c.mu.Lock()
	c.ended = true
	c.mu.Unlock()
	if c.cancel != nil {
		c.cancel(nil)
	}
	return lost
}

// abandon ends a claim whose work panicked or exited: released, nothing
// recorded.
func (c *claim) abandon(why error) {
	c.end()
	c.observe(EventFailure, why)
	_ = c.release()
}

// release makes the claim claimable at once; it returns the store's error,
// if any (a refusal as ErrLostOwnership).
func (c *claim) release() error {
	if c.otx != nil { // its transaction's rollback left nothing to release
		return nil
	}
	rctx, cancel := context.WithTimeout(c.bg, c.e.takeover)
	defer cancel()
	if err := c.keepHistory(rctx); err != nil {
		// The claim is left to go stale: a stale claim is found under its
		// key by every secret's caller, a released one without its epoch
		// is not (see rotate.go).
		return storeErr("release", err)
	}
	if err := c.e.store.Release(rctx, c.sk, c.rec.Nonce); err != nil {
		return c.ownershipOr("release", err)
	}
	return nil
}

// cutOff returns err, the error of work that has ended, joined with the
// *lapseError its context was cancelled with, if the claim lapsed: the
// caller can then tell with errors.Is(err, ErrLostOwnership) a call cut off
// by the Guard, which may be tried again, from one given up by its own
// context. (The first cancellation's cause stays, so this holds after end.)
func (c *claim) cutOff(err error) error {
	var lapse *lapseError
	if errors.As(context.Cause(c.fctx), &lapse) && !errors.Is(err, ErrLostOwnership) {
		return joinErr(err, lapse)
	}
	return err
}

// fail ends a claim whose work returned err: released under Unlock, stored
// under Lock. interrupted says the work's context had been cancelled (by
// its caller, or by the Guard when the claim could not be refreshed). It
// returns what the call returns beside fn's value (see cutOff); a failure
// stored under Lock holds err alone.
func (c *claim) fail(err error, interrupted bool) error {
	ret := c.cutOff(err)
	// A context error after fn's context was cancelled is the call being
	// given up, not an outcome of the operation: storing it under Lock
	// would refuse every retry for the record's TTL, so the claim is
	// released instead, as under Unlock.
	gaveUp := interrupted && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
	if c.e.fail == Unlock || gaveUp {
		return joinErr(ret, c.release())
	}
	comp := storekit.Completion{Status: storekit.StatusFailed, Error: storableError(err.Error(), c.e.errType(err), maxStoredMessage), TTL: c.e.ttl}
	return joinErr(ret, c.complete(comp))
}

// success is the completion of work whose result encode encodes. A result
// that cannot be encoded (encode fails or panics) completes the record
// without a result: the side effect happened, so the key must not run
// again, and replays get ErrResultUnavailable.
func (c *claim) success(encode func() ([]byte, error)) storekit.Completion {
	comp := storekit.Completion{Status: storekit.StatusCompleted, TTL: c.e.ttl}
	b, err := safeEncode(encode)
	if err != nil {
		c.observe(EventResultUnavailable, err)
		comp.Error = storableError("result could not be encoded: "+err.Error(), storekit.ResultUnavailableType, maxStoredMessage)
		return comp
	}
	comp.Result = b
	return comp
}

// safeEncode calls encode, turning a panic into an error.
func safeEncode(encode func() ([]byte, error)) (b []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			b, err = nil, fmt.Errorf("encoder panicked: %v", p)
		}
	}()
	return encode()
}

// complete stores the outcome comp, retrying transient failures with
// backoff while the claim can still be ours (until a takeover could have
// happened). A completion the store refuses for good is replaced once by
// one without a result (see withoutResult), so the key still ends. When
// retries run out, the outcome is settled before answering (see
// unsettled). On success the flight's followers are handed the record.
func (c *claim) complete(comp storekit.Completion) error {
	deadline := time.Now().Add(c.e.takeover)
	backoff := 10 * time.Millisecond
	maybeApplied := false // a failed attempt may have reached the store
	for {
		actx, cancel := context.WithDeadline(c.bg, deadline)
		err := c.e.store.Complete(actx, c.sk, c.rec.Nonce, comp)
		cancel()
		switch {
		case err == nil:
			c.completed(comp)
			return nil
		case errors.Is(err, ErrLostOwnership):
			c.observe(EventLostOwnership, nil)
			return fmt.Errorf("idem: complete refused: %w", err)
		case errors.Is(err, ErrNotRecorded):
			// The store applied the write but cannot vouch that it will
			// last (redisstore.WithReplicaAck: too few replicas hold it):
			// retrying or reading back would not change that.
			c.observe(EventNotRecorded, err)
			return err
		case errors.Is(err, storekit.ErrPermanent):
			// The store refused this value and would refuse it again: store
			// the smaller outcome instead, once, without waiting.
			if smaller, ok := withoutResult(comp, err); ok {
				if comp.Status == storekit.StatusCompleted {
					c.observe(EventResultUnavailable, err)
				}
				comp = smaller
				continue
			}
			return c.unsettled(comp, err, maybeApplied)
		}
		maybeApplied = maybeApplied || !unsent(err)
		wait := lease.Jitter(backoff)
		if time.Now().Add(wait).After(deadline) {
			return c.unsettled(comp, err, maybeApplied)
		}
		time.Sleep(wait)
		backoff = min(2*backoff, time.Second)
	}
}

// completed hands the flight's followers the record as comp left it. The
// claim's own record becomes it: the claim has ended (its heartbeat is
// stopped, and nothing reads it after its completion but its attempt).
func (c *claim) completed(comp storekit.Completion) {
	if c.f == nil {
		return
	}
	c.rec.Status, c.rec.Result, c.rec.Error = comp.Status, comp.Result, comp.Error
	c.f.final = c.rec
}

// unsettled answers a completion whose last attempt failed with err. It
// reads the record back first: if it carries this claim's outcome, the
// outcome was recorded after all (a reply was lost).
//
// ErrNotRecorded is answered only when it is true for good: no attempt can
// have reached the store, or the record has moved on to another claim (a
// late completion of ours is then refused). A record still in progress
// under this claim's nonce (or one the store no longer returns, which may
// still carry it) could yet take a completion that is delayed in the
// network: the claim is fenced first (see fence). When the store cannot be
// read, or the fence cannot be set, nobody can know, and the answer is
// ErrOutcomeUnknown.
func (c *claim) unsettled(comp storekit.Completion, err error, maybeApplied bool) error {
	gctx, cancel := context.WithTimeout(c.bg, max(c.e.beat, 250*time.Millisecond))
	cur, gerr := c.e.store.Get(gctx, c.sk)
	cancel()
	switch {
	case gerr == nil && cur.Nonce == c.rec.Nonce && cur.Status != storekit.StatusInProgress:
		if c.f != nil {
			c.f.final = cur
		}
		return nil
	case !maybeApplied || gerr == nil && cur.Nonce != c.rec.Nonce:
		c.observe(EventNotRecorded, err)
		return &storekit.NotRecordedError{Err: storeErr("complete", err)}
	case gerr != nil && !errors.Is(gerr, storekit.ErrNotFound):
		c.observe(EventNotRecorded, err)
		return &storekit.OutcomeUnknownError{Err: storeErr("complete", err), ReadErr: gerr}
	}
	return c.fence(&comp, err)
}

// fence makes a late completion of this claim impossible, then records
// comp after all if it can (comp nil: it only fences). It claims the key
// with a new nonce (a takeover once the claim is stale; the heartbeat
// stopped when the work ended), so a delayed Complete with the old nonce
// is refused, and completes comp under the new nonce. A record that turns
// out completed under the old nonce (the delayed write landed meanwhile) is
// the outcome recorded.
func (c *claim) fence(comp *storekit.Completion, err error) error {
	deadline := time.Now().Add(c.e.takeover + c.e.beat)
	backoff := 10 * time.Millisecond
	var last error = err
	for {
		tried := time.Now()
		n, rec, cerr := c.e.tryClaim(c.bg, c.sk, c.ph)
		switch {
		case cerr != nil:
			last = cerr
		case n != nil: // the old nonce is fenced off
			n.f = c.f
			return n.settleFenced(comp, err)
		case rec.Nonce == c.rec.Nonce && rec.Status != storekit.StatusInProgress:
			if c.f != nil {
				c.f.final = rec
			}
			return nil
		case rec.Nonce != c.rec.Nonce: // another claim holds the key: ours can no longer complete
			c.observe(EventNotRecorded, err)
			return &storekit.NotRecordedError{Err: storeErr("complete", err)}
		}
		// The claim is stale for certain by the deadline, so the last try
		// is one that starts at or after it, however long the tries before
		// took: a slow store could otherwise answer "live" to a try that
		// started just before the claim went stale and end the loop past
		// the deadline without a try that could see it.
		if !tried.Before(deadline) {
			break
		}
		time.Sleep(min(lease.Jitter(backoff), max(time.Until(deadline), 0)))
		backoff = min(2*backoff, c.e.pollMax())
	}
	c.observe(EventNotRecorded, err)
	return &storekit.OutcomeUnknownError{Err: storeErr("complete", err), ReadErr: fmt.Errorf("fencing off a late completion: %w", last)}
}

// settleFenced runs under the claim that fenced off an earlier one whose
// completion failed with err: it completes comp (the outcome is recorded
// after all), or, with comp nil or once that completion failed for
// certain, releases the claim and answers ErrNotRecorded, true now that no
// earlier nonce can complete. A completion here whose fate is unknown is
// fenced off in turn, without a completion of its own.
func (c *claim) settleFenced(comp *storekit.Completion, err error) error {
	if comp != nil {
		cctx, cancel := context.WithTimeout(c.bg, c.e.takeover)
		cerr := c.e.store.Complete(cctx, c.sk, c.rec.Nonce, *comp)
		cancel()
		switch {
		case cerr == nil:
			c.completed(*comp)
			return nil
		case !errors.Is(cerr, ErrLostOwnership) && !errors.Is(cerr, storekit.ErrPermanent) && !unsent(cerr):
			return c.fence(nil, err)
		}
	}
	_ = c.release()
	c.observe(EventNotRecorded, err)
	return &storekit.NotRecordedError{Err: storeErr("complete", err)}
}

// withoutResult returns the completion to store when the store refused c
// for good (refusal, its error): a success keeps its status without the
// result, as an unencodable one does; a failure keeps its type with a
// short message. ok is false when c is already that small.
func withoutResult(c storekit.Completion, refusal error) (storekit.Completion, bool) {
	if c.Status == storekit.StatusCompleted && c.Result != nil {
		msg := "result refused by the store: " + refusal.Error()
		return storekit.Completion{Status: storekit.StatusCompleted, Error: storableError(msg, storekit.ResultUnavailableType, minStoredMessage), TTL: c.TTL}, true
	}
	if c.Error != nil && len(c.Error.Message) > minStoredMessage {
		return storekit.Completion{Status: c.Status, Error: storableError(c.Error.Message, c.Error.Type, minStoredMessage), TTL: c.TTL}, true
	}
	return c, false
}

// ownershipOr turns a store error of op into what the call returns: a
// refusal for a lost claim, else a *StoreError.
func (c *claim) ownershipOr(op string, err error) error {
	if errors.Is(err, ErrLostOwnership) {
		c.observe(EventLostOwnership, nil)
		return fmt.Errorf("idem: %s refused: %w", op, err)
	}
	return storeErr(op, err)
}

// heartbeat refreshes the claim while its work runs (see lease.Refresher:
// a timer, not a goroutine, so work that returns within one interval costs
// no heartbeat at all). Stop it with stopHeartbeat, which reports whether
// ownership was lost. The claim is the Refresher's lease.Holder.
//
// If no heartbeat succeeds for takeover minus half an interval, another
// caller may take the claim over before the next one could tell: the
// work's context is cancelled with a *lapseError first (see Lapsed). The
// lapse is counted from when the last successful refresh was sent (the
// store's HeartbeatAt is no earlier), and leaves half an interval, not a
// whole one, so that the next heartbeat has time to succeed even when the
// interval is half the threshold.
func (c *claim) heartbeat() {
	e := c.e
	cfg := lease.Config{Interval: e.beat, Margin: e.beat / 2}
	if e.observer != nil { // only an observer sees these (and a call without one allocates no closure for them)
		cfg.OnRefresh = func(left time.Duration) {
			e.observe(c.bg, Event{Kind: EventHeartbeat, StorageKey: c.sk, Attempt: c.rec.Attempt, Duration: left})
		}
		cfg.OnError = func(err error) {
			e.observe(c.bg, Event{Kind: EventHeartbeat, StorageKey: c.sk, Attempt: c.rec.Attempt, Err: err})
		}
	}
	c.hb.Start(c.bg, c.cancel, c.sent, e.takeover, c, cfg)
}

// Refresh implements lease.Holder: one heartbeat.
func (c *claim) Refresh(ctx context.Context) (time.Duration, error) {
	err := c.e.store.Heartbeat(ctx, c.sk, c.rec.Nonce, c.e.lease)
	if err == nil && c.call != nil {
		c.call.keepAlive(c.bg)
	}
	return c.e.takeover, err
}

// Lost implements lease.Holder: a refused heartbeat means the claim was
// taken over; anything else is transient.
func (c *claim) Lost(err error) error {
	if errors.Is(err, ErrLostOwnership) {
		return fmt.Errorf("idem: claim taken over: %w", ErrLostOwnership)
	}
	return nil
}

// Lapsed implements lease.Holder: the work is cut off with a *lapseError.
func (c *claim) Lapsed(since time.Duration, _ error) error {
	c.e.observe(c.bg, Event{Kind: EventLapse, StorageKey: c.sk, Attempt: c.rec.Attempt, Duration: max(c.e.takeover-since, 0)})
	c.mu.Lock()
	onLapse := c.onLapse
	c.mu.Unlock()
	if onLapse != nil {
		onLapse()
	}
	return &lapseError{Since: since.Round(time.Millisecond)}
}

// setOnLapse sets what the claim calls when it lapses.
func (c *claim) setOnLapse(f func()) {
	c.mu.Lock()
	c.onLapse = f
	c.mu.Unlock()
}

// callContext is the parent of a call's fn context: ctx with the call in
// it, for Step, and the claim's fencing token.
func (c *claim) callContext() context.Context {
	return &callCtx{Context: c.ctx, call: stepCall{e: c.e, sk: c.sk, ctx: c.ctx, attempt: c.rec.Attempt}}
}

// keepHistory makes sure, before a call's claim is released by a Guard
// with a secret (which a rotation may later change), that the call's past
// stays findable under its key by every secret's caller: a released record
// is not live, so Get does not see it, but the call's steps epoch is. A
// claim with a past (fn began under it, or it took over a stale claim)
// gets one if it has none yet (one claim, only on this path). Without a
// secret there is no rotation, and a release writes nothing else.
func (c *claim) keepHistory(ctx context.Context) error {
	c.mu.Lock()
	ran := c.ran
	c.mu.Unlock()
	if c.step || len(c.e.keys.secret) == 0 || !(ran || c.took) {
		return nil
	}
	if c.call != nil && c.call.hasEpoch() {
		return nil
	}
	_, err := c.e.claimEpoch(ctx, c.sk)
	return err
}
