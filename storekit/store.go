package storekit

import (
	"context"
	"fmt"
	"iter"
	"time"
)

// Store keeps records and makes each transition on them atomic. Every store
// of this project implements it (stores/memstore, stores/filestore,
// stores/redisstore, stores/dynamostore, stores/sqlstore), and
// stores/storetest checks any implementation against the contract below.
// A third-party store is written with package storekit (the claim decision,
// the record codec, the request checks, and a locked read-modify-write
// adapter) and checked with stores/storetest.
//
// Keys passed to a Store are storage keys made by a Guard: a short prefix
// and a hex digest, never caller input. A store decides expiry and staleness
// with the fields of the record and its own notion of now (its server's
// clock where it has one), never by whether its native expiry has deleted
// the record yet.
//
// The method docs below are the claim rules, stated once: storekit's
// DecideClaim, ApplyHeartbeat, ApplyComplete and ApplyRelease implement them
// in Go, and a store that runs them in its backend (Lua, SQL, condition
// expressions) implements the same rules there.
type Store interface {
	// Claim is one atomic step, the first rule that applies deciding:
	//   - no live record (none, or ExpiresAt <= now): write a new
	//     in_progress record with req.Nonce and req.PayloadHash, Attempt =
	//     previous attempt + 1 (1 when there was none), StartedAt =
	//     HeartbeatAt = now, ExpiresAt = now + req.LeaseTTL, TakeoverMs =
	//     req.TakeoverAfter (the owner's threshold is stored); outcome
	//     Claimed.
	//   - a live record that already carries req.Nonce (a retried claim
	//     whose first try was applied): return it untouched as Claimed.
	//   - a live in_progress record with the same PayloadHash whose
	//     heartbeat is at least its stored TakeoverMs old (req.TakeoverAfter
	//     only when none is stored; Record.Stale): replace its nonce with
	//     req.Nonce, Attempt+1, StartedAt = HeartbeatAt = now, ExpiresAt =
	//     max(ExpiresAt, now + req.LeaseTTL), TakeoverMs =
	//     req.TakeoverAfter; outcome TookOver.
	//   - otherwise: return the live record untouched; outcome Existing.
	Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error)

	// Heartbeat sets HeartbeatAt = now and ExpiresAt to at least
	// now + leaseTTL, if the record is in_progress, live (ExpiresAt > now)
	// and carries nonce. Otherwise it changes nothing and returns
	// ErrLostOwnership: a released or expired claim is not revived by a
	// late heartbeat of its old owner.
	Heartbeat(ctx context.Context, key, nonce string, leaseTTL time.Duration) error

	// Complete records the outcome if the record carries nonce: status,
	// result and error from c, CompletedAt = HeartbeatAt = now, ExpiresAt =
	// now + c.TTL.
	// Otherwise it changes nothing and returns ErrLostOwnership. A retried
	// Complete that finds its own outcome already written succeeds. A store
	// that applied the write but cannot vouch it will last (a replicated
	// store short of acknowledgements) returns an error matching
	// ErrNotRecorded, which the Guard reports as such without retrying.
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
	// Owner names the claiming process (FormatOwner: its instance, if
	// it has one, and the store's Presence token), "" for a claim that
	// must never be taken over before its threshold (a steps epoch).
	Owner string
	// Tenant and Scope are the Guard's namespace (WithNamespace). Key
	// already mixes them in; a store may keep them beside the record for
	// operators (the SQL table's tenant and scope columns) but must not
	// need them to find a record.
	Tenant, Scope string
}

// ClaimOutcome says what Claim did.
type ClaimOutcome int

// Claim outcomes.
const (
	Existing ClaimOutcome = iota // a live record exists; it was returned untouched
	Claimed                      // a new claim was written
	TookOver                     // a stale claim was taken over
)

// String returns "existing", "claimed" or "took_over", and
// "ClaimOutcome(n)" for any other value.
func (o ClaimOutcome) String() string {
	switch o {
	case Claimed:
		return "claimed"
	case TookOver:
		return "took_over"
	case Existing:
		return "existing"
	}
	return fmt.Sprintf("ClaimOutcome(%d)", int(o))
}

// ClaimResult is the output of Store.Claim: the record as it is after the
// claim, and what the claim did.
type ClaimResult struct {
	Outcome ClaimOutcome
	// Record is the record as the claim left it, handed to the caller: a
	// Guard changes it when the claim completes, so a store that needs the
	// record later keeps a copy of its own.
	Record *Record
	// OwnerGone is set with TookOver when the claim was taken over because
	// its owner was known gone (Presence, an earlier incarnation), not
	// because it was stale. A store that cannot tell leaves it false.
	OwnerGone bool
}

// Completion is the outcome written by Store.Complete.
type Completion struct {
	Status Status           // StatusCompleted or StatusFailed
	Result []byte           // encoded result, nil if none
	Error  *RecordedFailure // failure, or why the result is unavailable
	TTL    time.Duration    // how long the completed record is kept
}

// StorageKeyPrefix starts every storage key a Guard makes. The rest is the
// hex SHA-256 (or HMAC-SHA256) of the tenant, scope and key.
const StorageKeyPrefix = "idem:"

// Lister is implemented by stores that can list their records, for
// operators (idem ls, idem stats).
//
// Records yields every live record of the store (expired ones are skipped),
// each once, in no particular order, reading the store in pages so that
// memory stays flat however many records there are; it takes no lock that
// would hold up a claim. A record written, changed or removed while the
// listing runs may be yielded in its old or new state, or not at all.
// Errors are yielded with a nil record: a record that cannot be decoded as
// a *CorruptRecordError, after which the listing goes on if the caller
// does; any other error ends the sequence. The records of
// a call's steps are records too, under storage keys derived from the
// call's, and are listed like any other.
//
// Stores whose keys are not ordered by the backend (Redis, DynamoDB, NATS,
// files) scan their whole keyspace to list; their docs say so.
type Lister interface {
	Records(ctx context.Context) iter.Seq2[*Record, error]
}

// Presence is implemented by stores that can tell at once that the process
// holding a claim is gone: the store holds something the backend releases
// when the process dies (a file lock, a session), named by Owner. A Guard
// sends Owner with its claims; the store records it, and a claim that
// meets an in-progress record whose owner it knows is gone takes it over
// at once instead of after the takeover threshold. The store must never
// say an owner is gone while that owner's process lives.
type Presence interface {
	Owner() string
}
