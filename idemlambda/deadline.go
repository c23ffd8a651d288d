package idemlambda

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/idem-go/idem/storekit"
)

// DefaultDeadlineGrace is how long past an invocation's deadline its claims
// stay alive (WithDeadlineGrace): room for the clock skew between the
// invocation's host and a retry's, since DynamoDB and the file and memory
// stores decide expiry with the caller's clock.
const DefaultDeadlineGrace = 250 * time.Millisecond

// ErrInvocationOver is returned (wrapped in an *idem.StoreError) by a call
// that would claim a key after its invocation's deadline and grace have
// passed: a claim made then would be dead as it is written.
var ErrInvocationOver = errors.New("idemlambda: the invocation's deadline has passed")

// endKey is the context key of the instant an invocation's claims die.
type endKey struct{}

// withEnd returns ctx carrying end, the instant the claims made under it
// must be dead by: the invocation's deadline plus the grace. The Guard
// hands the values of the caller's context to every store call of the
// claim, heartbeats included (it drops only the cancellation), so the store
// sees end on each of them.
func withEnd(ctx context.Context, grace time.Duration) context.Context {
	d, ok := ctx.Deadline()
	if !ok {
		return ctx
	}
	return context.WithValue(ctx, endKey{}, d.Add(grace))
}

// leaseLeft is the longest lease a claim made or refreshed under ctx may
// have, and whether ctx sets one.
func leaseLeft(ctx context.Context) (time.Duration, bool) {
	end, ok := ctx.Value(endKey{}).(time.Time)
	if !ok {
		return 0, false
	}
	return time.Until(end), true
}

// deadlineStore is the store under an adapter's Guard: it caps the lease
// of every claim and heartbeat made in an invocation at the invocation's
// end (withEnd), so that the record expires then, whatever its heartbeats
// did, and the next claim of the key, a retry's, is a fresh claim at once.
// It changes nothing else: staleness (the takeover threshold), completions
// and releases are the inner store's.
type deadlineStore struct {
	storekit.Store
}

// watchingStore is a deadlineStore over a store that can push changes, so
// that a Guard in Wait mode keeps its wake-ups.
type watchingStore struct {
	deadlineStore
	w storekit.Watcher
}

// Watch implements storekit.Watcher.
func (s watchingStore) Watch(ctx context.Context, key string) (<-chan struct{}, func(), error) {
	return s.w.Watch(ctx, key)
}

// wrapStore returns store with its leases capped by the invocation's end.
func wrapStore(store storekit.Store) storekit.Store {
	if store == nil {
		return nil
	}
	d := deadlineStore{store}
	if w, ok := store.(storekit.Watcher); ok {
		return watchingStore{d, w}
	}
	return d
}

// Validate passes the inner store's own check on, for idem.New.
func (s deadlineStore) Validate() error {
	if v, ok := s.Store.(interface{ Validate() error }); ok {
		return v.Validate()
	}
	return nil
}

// Claim implements storekit.Store: the lease is cut to the time left,
// except a call's steps epoch's: the epoch names the generation of the
// call's steps and must live as long as the call, so that the retry of an
// invocation that finished a step replays it (its heartbeats are capped
// too, but a heartbeat never shortens a lease).
func (s deadlineStore) Claim(ctx context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, error) {
	if left, ok := leaseLeft(ctx); ok && req.PayloadHash != storekit.StepsEpochPayload {
		if left < time.Millisecond {
			return storekit.ClaimResult{}, ErrInvocationOver
		}
		req.LeaseTTL = min(req.LeaseTTL, left)
	}
	return s.Store.Claim(ctx, req)
}

// Heartbeat implements storekit.Store: the lease is cut to the time left;
// past the end the claim is dead, and the heartbeat says it is lost.
func (s deadlineStore) Heartbeat(ctx context.Context, key, nonce string, leaseTTL time.Duration) error {
	if left, ok := leaseLeft(ctx); ok {
		if left < time.Millisecond {
			return fmt.Errorf("%w: %w", ErrInvocationOver, storekit.ErrLostOwnership)
		}
		leaseTTL = min(leaseTTL, left)
	}
	return s.Store.Heartbeat(ctx, key, nonce, leaseTTL)
}
