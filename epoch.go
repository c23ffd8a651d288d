package idem

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"time"

	"github.com/idem-go/idem/lease"
	"github.com/idem-go/idem/storekit"
)

// claimEpoch claims the steps epoch record of the call sk: a new one, or
// the live one returned untouched (it is never taken over while it lives:
// its takeover threshold is its lifetime).
func (e *engine) claimEpoch(ctx context.Context, sk string) (storekit.ClaimResult, error) {
	life := e.stepsLife()
	res, err := e.store.Claim(ctx, storekit.ClaimRequest{
		Key: epochKey(sk), Nonce: lease.Token(), PayloadHash: storekit.StepsEpochPayload, LeaseTTL: life, TakeoverAfter: life,
		Tenant: e.tenant, Scope: e.scope,
	})
	if err != nil {
		return res, storeErr("claim", err)
	}
	if res.Record == nil || res.Record.Nonce == "" {
		return res, &StoreError{Op: "claim", Err: errors.New("store returned no steps epoch record")}
	}
	return res, nil
}

// stepsLife is how long a call's step records live past the last time the
// call made them live (see above).
func (e *engine) stepsLife() time.Duration { return e.ttl + e.lease }

// epochKey is the storage key of the steps epoch record of the call sk.
func epochKey(sk string) string { return derivedKey("idem/steps-epoch/v1", sk) }

// derivedKey is a storage key derived from fields: shaped like every other
// storage key (the prefix and 64 hex digits), so every store takes it.
func derivedKey(fields ...string) string {
	return storekit.StorageKeyPrefix + digest(fields...)
}

func stepKeyOf(sk, epoch, name string) string { return digest("idem/step-key/v1", sk, epoch, name) }

// digest is the hex SHA-256 of length-prefixed fields.
func digest(fields ...string) string {
	var b []byte
	for _, f := range fields {
		b = appendField(b, f)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// hasEpoch reports whether the call of storage key sk has a live steps
// epoch: it ran steps, or it was released during a rotation (see
// keepHistory), so its home is sk.
func (e *engine) hasEpoch(ctx context.Context, sk string) (bool, error) {
	_, err := e.store.Get(ctx, epochKey(sk))
	switch {
	case errors.Is(err, storekit.ErrNotFound):
		return false, nil
	case err != nil:
		return false, storeErr("get", err)
	}
	return true, nil
}
