package idem

import (
	"context"
	"time"
)

// Store keeps records and makes each transition on them atomic. Every store
// in this module (memstore, filestore, redisstore, dynamostore) implements
// it, and stores/storetest checks any implementation against the contract
// below.
//
// Keys passed to a Store are storage keys made by a Guard: a short prefix
// and a hex digest, never caller input. A store decides expiry and staleness
// with the fields of the record and its own notion of now (its server's
// clock where it has one), never by whether its native expiry has deleted
// the record yet.
type Store interface {
	// Claim is one atomic step:
	//   - no live record (none, or ExpiresAt <= now): write a new
	//     in_progress record with req.Nonce, Attempt = previous attempt + 1
	//     (1 when there was none), StartedAt = HeartbeatAt = now,
	//     ExpiresAt = now + req.LeaseTTL; outcome Claimed.
	//   - a live in_progress record with the same PayloadHash whose
	//     heartbeat is at least req.TakeoverAfter old: replace its nonce with
	//     req.Nonce, Attempt+1, StartedAt = HeartbeatAt = now; outcome TookOver.
	//   - a live record that already carries req.Nonce (a retried claim
	//     whose first try was applied): return it as Claimed.
	//   - otherwise: return the live record untouched; outcome Existing.
	Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error)

	// Heartbeat sets HeartbeatAt = now and ExpiresAt to at least
	// now + leaseTTL, if the record is in_progress, live (ExpiresAt > now)
	// and carries nonce. Otherwise it changes nothing and returns
	// ErrLostOwnership: a released or expired claim is not revived by a
	// late heartbeat of its old owner.
	Heartbeat(ctx context.Context, key, nonce string, leaseTTL time.Duration) error

	// Complete records the outcome if the record carries nonce: status,
	// result and error from c, CompletedAt = now, ExpiresAt = now + c.TTL.
	// Otherwise it changes nothing and returns ErrLostOwnership. A retried
	// Complete that finds its own outcome already written succeeds.
	Complete(ctx context.Context, key, nonce string, c Completion) error

	// Release makes an in_progress record that carries nonce claimable at
	// once (ExpiresAt = now, keeping Attempt so fencing tokens stay
	// monotonic; a store may delete it instead). Otherwise it changes nothing
	// and returns ErrLostOwnership.
	Release(ctx context.Context, key, nonce string) error

	// Get returns the live record, or ErrNotFound.
	Get(ctx context.Context, key string) (*Record, error)

	// Delete removes the record whatever its state. Deleting a missing
	// record is not an error.
	Delete(ctx context.Context, key string) error
}

// Watcher is implemented by stores that can push a change: Watch returns a
// channel that is closed when the record for key may have changed after
// Watch returned, and a function that stops watching. A Guard in Wait mode
// uses it to wake without polling; it still polls, slowly, as a safety net.
type Watcher interface {
	Watch(ctx context.Context, key string) (changed <-chan struct{}, stop func(), err error)
}

// ClaimRequest is the input of Store.Claim.
type ClaimRequest struct {
	Key           string        // storage key
	Nonce         string        // fresh random ownership token
	PayloadHash   string        // canonical hash of the call's payload, "" if none
	LeaseTTL      time.Duration // lifetime of the in_progress record
	TakeoverAfter time.Duration // heartbeat age at which a claim is stale
}

// ClaimOutcome says what Claim did.
type ClaimOutcome int

// Claim outcomes.
const (
	Existing ClaimOutcome = iota // a live record exists; it was returned untouched
	Claimed                      // a new claim was written
	TookOver                     // a stale claim was taken over
)

func (o ClaimOutcome) String() string {
	switch o {
	case Claimed:
		return "claimed"
	case TookOver:
		return "took_over"
	default:
		return "existing"
	}
}

// ClaimResult is the output of Store.Claim: the record as it is after the
// claim, and what the claim did.
type ClaimResult struct {
	Outcome ClaimOutcome
	Record  *Record
}

// Completion is the outcome written by Store.Complete.
type Completion struct {
	Status Status        // StatusCompleted or StatusFailed
	Result []byte        // encoded result, nil if none
	Error  *StoredError  // failure, or why the result is unavailable
	TTL    time.Duration // how long the completed record is kept
}

// DecideClaim applies the Claim rules to the current record (nil if none)
// at now (Unix ms) and returns the result; when the outcome is Claimed or
// TookOver the returned record is the one to write. Stores that hold a lock
// around read-decide-write (memstore, filestore) share it, and so can
// third-party stores.
func DecideClaim(cur *Record, req ClaimRequest, now int64) ClaimResult {
	lease := req.LeaseTTL.Milliseconds()
	if cur == nil || !cur.Live(now) {
		attempt := int64(1)
		if cur != nil {
			attempt = cur.Attempt + 1
		}
		return ClaimResult{Outcome: Claimed, Record: &Record{
			Key: req.Key, Status: StatusInProgress, PayloadHash: req.PayloadHash,
			Nonce: req.Nonce, Attempt: attempt, StartedAt: now, HeartbeatAt: now,
			ExpiresAt: now + lease,
		}}
	}
	if cur.Nonce == req.Nonce {
		return ClaimResult{Outcome: Claimed, Record: cur}
	}
	if cur.PayloadHash == req.PayloadHash && cur.Stale(now, req.TakeoverAfter) {
		next := cur.Clone()
		next.Nonce = req.Nonce
		next.Attempt = cur.Attempt + 1
		next.StartedAt, next.HeartbeatAt = now, now
		next.ExpiresAt = max(cur.ExpiresAt, now+lease)
		return ClaimResult{Outcome: TookOver, Record: next}
	}
	return ClaimResult{Outcome: Existing, Record: cur}
}

// ApplyHeartbeat returns the record after a heartbeat at now, or
// ErrLostOwnership.
func ApplyHeartbeat(cur *Record, nonce string, leaseTTL time.Duration, now int64) (*Record, error) {
	if cur == nil || cur.Status != StatusInProgress || cur.Nonce != nonce || !cur.Live(now) {
		return nil, ErrLostOwnership
	}
	next := cur.Clone()
	next.HeartbeatAt = now
	next.ExpiresAt = max(cur.ExpiresAt, now+leaseTTL.Milliseconds())
	return next, nil
}

// ApplyComplete returns the record after a completion at now, or
// ErrLostOwnership.
func ApplyComplete(cur *Record, nonce string, c Completion, now int64) (*Record, error) {
	if cur == nil || cur.Nonce != nonce {
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

// ApplyRelease returns the record after a release at now, or
// ErrLostOwnership.
func ApplyRelease(cur *Record, nonce string, now int64) (*Record, error) {
	if cur == nil || cur.Status != StatusInProgress || cur.Nonce != nonce {
		return nil, ErrLostOwnership
	}
	next := cur.Clone()
	next.ExpiresAt = now
	return next, nil
}
