package storekit

import (
	"time"
)

// Decision is what DecideClaim concluded: the claim's outcome, the record as
// it is after the claim, and whether that record must be written.
type Decision struct {
	Outcome ClaimOutcome
	// Record is what Claim returns: the record to write when Write is set,
	// otherwise the current record, untouched.
	Record *Record
	// Write is true when the claim changes the store: a new claim or a
	// takeover. It is false for an existing live record and for a retried
	// claim whose first try was applied (Outcome Claimed, nothing to
	// write). A store that writes conditionally writes Record only if the
	// key still holds the record it decided on.
	Write bool
	// OwnerGone is set with TookOver when the record was live but its
	// owner is known gone (ClaimResult.OwnerGone).
	OwnerGone bool
}

// Result is the decision as Store.Claim returns it.
func (d Decision) Result() ClaimResult {
	return ClaimResult{Outcome: d.Outcome, Record: d.Record, OwnerGone: d.OwnerGone}
}

// DecideClaim applies the rules of Store.Claim (stated in its doc) to
// the current record (nil if there is none) at now (Unix milliseconds, the
// store's clock). It never modifies cur.
func DecideClaim(cur *Record, req ClaimRequest, now int64) Decision {
	return DecideClaimGone(cur, req, now, nil)
}

// DecideClaimGone is DecideClaim for a store with Presence: gone, if not
// nil, reports whether the Presence token of an in-progress record's owner
// (OwnerToken) is known to be gone (its process died), and such a record
// is taken over at once, as a stale one is. So is one left by an earlier
// incarnation of the claiming process's instance (EarlierIncarnation),
// with or without gone. It is asked only about another process's live in-progress
// record with the claim's payload hash.
func DecideClaimGone(cur *Record, req ClaimRequest, now int64, gone func(owner string) bool) Decision {
	lease := req.LeaseTTL.Milliseconds()
	if cur == nil || !cur.Live(now) {
		attempt := int64(1)
		if cur != nil {
			attempt = cur.Attempt + 1
		}
		return Decision{Outcome: Claimed, Write: true, Record: &Record{
			Key: req.Key, Status: StatusInProgress, PayloadHash: req.PayloadHash,
			Nonce: req.Nonce, Attempt: attempt, StartedAt: now, HeartbeatAt: now,
			ExpiresAt: now + lease, TakeoverMs: req.TakeoverAfter.Milliseconds(), Owner: req.Owner,
		}}
	}
	if cur.Nonce == req.Nonce {
		return Decision{Outcome: Claimed, Record: cur}
	}
	stale := cur.Stale(now, req.TakeoverAfter)
	if cur.PayloadHash == req.PayloadHash && (stale || ownerGone(cur, req, gone)) {
		next := cur.Clone()
		next.Nonce = req.Nonce
		next.Attempt = cur.Attempt + 1
		next.StartedAt, next.HeartbeatAt = now, now
		next.ExpiresAt = max(cur.ExpiresAt, now+lease)
		next.TakeoverMs = req.TakeoverAfter.Milliseconds()
		next.Owner = req.Owner
		return Decision{Outcome: TookOver, Record: next, Write: true, OwnerGone: !stale}
	}
	return Decision{Outcome: Existing, Record: cur}
}

// ownerGone reports whether cur is an in-progress claim of another
// process known to be gone: an earlier incarnation of the claiming
// process's instance, or an owner whose token gone says is gone.
func ownerGone(cur *Record, req ClaimRequest, gone func(string) bool) bool {
	if cur.Status != StatusInProgress || cur.Owner == "" || cur.Owner == req.Owner {
		return false
	}
	if EarlierIncarnation(cur.Owner, req.Owner) {
		return true
	}
	tok := OwnerToken(cur.Owner)
	return gone != nil && tok != "" && gone(tok)
}

// ApplyHeartbeat returns the record to write after a heartbeat at now, or
// ErrLostOwnership and nothing to write, by the rules of
// Store.Heartbeat.
func ApplyHeartbeat(cur *Record, nonce string, leaseTTL time.Duration, now int64) (*Record, error) {
	if !owns(cur, nonce) || cur.Status != StatusInProgress || !cur.Live(now) {
		return nil, ErrLostOwnership
	}
	next := cur.Clone()
	next.HeartbeatAt = now
	next.ExpiresAt = max(cur.ExpiresAt, now+leaseTTL.Milliseconds())
	return next, nil
}

// ApplyComplete returns the record to write after a completion at now, or
// ErrLostOwnership, by the rules of Store.Complete (a retried
// Complete that finds its own outcome writes it again, and succeeds). A
// completion that ValidateCompletion rejects is returned as its error.
func ApplyComplete(cur *Record, nonce string, c Completion, now int64) (*Record, error) {
	if err := ValidateCompletion(c); err != nil {
		return nil, err
	}
	if !owns(cur, nonce) {
		return nil, ErrLostOwnership
	}
	next := cur.Clone()
	next.Status = c.Status
	next.Result = c.Result
	next.Error = c.Error
	next.CompletedAt = now
	next.HeartbeatAt = now
	next.ExpiresAt = now + c.TTL.Milliseconds()
	return next, nil
}

// ApplyRelease returns the record to write after a release at now (the
// same record with ExpiresAt = now, so the next claim goes on counting
// attempts), or ErrLostOwnership, by the rules of Store.Release.
func ApplyRelease(cur *Record, nonce string, now int64) (*Record, error) {
	if !owns(cur, nonce) || cur.Status != StatusInProgress {
		return nil, ErrLostOwnership
	}
	next := cur.Clone()
	next.ExpiresAt = now
	return next, nil
}

// owns reports whether cur exists and carries nonce. An empty nonce owns
// nothing: no valid record carries one.
func owns(cur *Record, nonce string) bool {
	return cur != nil && nonce != "" && cur.Nonce == nonce
}
