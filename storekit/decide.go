package storekit

import (
	"time"

	"github.com/idem-go/idem"
)

// Decision is what DecideClaim concluded: the claim's outcome, the record as
// it is after the claim, and whether that record must be written.
type Decision struct {
	Outcome idem.ClaimOutcome
	// Record is what Claim returns: the record to write when Write is set,
	// otherwise the current record, untouched.
	Record *idem.Record
	// Write is true when the claim changes the store: a new claim or a
	// takeover. It is false for an existing live record and for a retried
	// claim whose first try was applied (Outcome Claimed, nothing to
	// write). A store that writes conditionally writes Record only if the
	// key still holds the record it decided on.
	Write bool
}

// Result is the decision as Store.Claim returns it.
func (d Decision) Result() idem.ClaimResult {
	return idem.ClaimResult{Outcome: d.Outcome, Record: d.Record}
}

// DecideClaim applies the rules of idem.Store.Claim to the current record
// (nil if there is none) at now (Unix milliseconds, the store's clock):
//
//   - no live record: a new in_progress record with req.Nonce, attempt one
//     more than the previous record's (1 when there was none), the lease
//     from req.LeaseTTL and the owner's takeover threshold; Claimed, Write.
//   - a live record carrying req.Nonce: a retried claim whose first try was
//     applied; Claimed, nothing to write.
//   - a live in_progress record with the same payload hash whose heartbeat
//     is at least its stored threshold old (idem.Record.Stale): a new nonce,
//     attempt+1, a fresh heartbeat; TookOver, Write.
//   - anything else: Existing, nothing to write.
//
// It never modifies cur.
func DecideClaim(cur *idem.Record, req idem.ClaimRequest, now int64) Decision {
	lease := req.LeaseTTL.Milliseconds()
	if cur == nil || !cur.Live(now) {
		attempt := int64(1)
		if cur != nil {
			attempt = cur.Attempt + 1
		}
		return Decision{Outcome: idem.Claimed, Write: true, Record: &idem.Record{
			Key: req.Key, Status: idem.StatusInProgress, PayloadHash: req.PayloadHash,
			Nonce: req.Nonce, Attempt: attempt, StartedAt: now, HeartbeatAt: now,
			ExpiresAt: now + lease, TakeoverMs: req.TakeoverAfter.Milliseconds(),
		}}
	}
	if cur.Nonce == req.Nonce {
		return Decision{Outcome: idem.Claimed, Record: cur}
	}
	if cur.PayloadHash == req.PayloadHash && cur.Stale(now, req.TakeoverAfter) {
		next := cur.Clone()
		next.Nonce = req.Nonce
		next.Attempt = cur.Attempt + 1
		next.StartedAt, next.HeartbeatAt = now, now
		next.ExpiresAt = max(cur.ExpiresAt, now+lease)
		next.TakeoverMs = req.TakeoverAfter.Milliseconds()
		return Decision{Outcome: idem.TookOver, Record: next, Write: true}
	}
	return Decision{Outcome: idem.Existing, Record: cur}
}

// ApplyHeartbeat returns the record to write after a heartbeat at now: the
// heartbeat moved to now and the lease extended to at least now+leaseTTL.
// It returns idem.ErrLostOwnership, and nothing to write, unless cur is a
// live in_progress record carrying nonce: a released or expired claim is
// not revived by its old owner's late heartbeat.
func ApplyHeartbeat(cur *idem.Record, nonce string, leaseTTL time.Duration, now int64) (*idem.Record, error) {
	if !owns(cur, nonce) || cur.Status != idem.StatusInProgress || !cur.Live(now) {
		return nil, idem.ErrLostOwnership
	}
	next := cur.Clone()
	next.HeartbeatAt = now
	next.ExpiresAt = max(cur.ExpiresAt, now+leaseTTL.Milliseconds())
	return next, nil
}

// ApplyComplete returns the record to write after a completion at now:
// the outcome of c, CompletedAt = now, ExpiresAt = now + c.TTL. A completion
// that ValidateCompletion rejects is returned as its error; a record that
// does not carry nonce is idem.ErrLostOwnership. A record that already
// carries nonce and an outcome (a retried Complete) is written again, so
// the retry succeeds.
func ApplyComplete(cur *idem.Record, nonce string, c idem.Completion, now int64) (*idem.Record, error) {
	if err := ValidateCompletion(c); err != nil {
		return nil, err
	}
	if !owns(cur, nonce) {
		return nil, idem.ErrLostOwnership
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

// ApplyRelease returns the record to write after a release at now: the
// same record with ExpiresAt = now, so the next claim goes on counting
// attempts. It returns idem.ErrLostOwnership unless cur is an in_progress
// record carrying nonce.
func ApplyRelease(cur *idem.Record, nonce string, now int64) (*idem.Record, error) {
	if !owns(cur, nonce) || cur.Status != idem.StatusInProgress {
		return nil, idem.ErrLostOwnership
	}
	next := cur.Clone()
	next.ExpiresAt = now
	return next, nil
}

// owns reports whether cur exists and carries nonce. An empty nonce owns
// nothing: no valid record carries one.
func owns(cur *idem.Record, nonce string) bool {
	return cur != nil && nonce != "" && cur.Nonce == nonce
}
