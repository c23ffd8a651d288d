package storekit

import (
	"context"
	"fmt"
	"time"
)

// Backend is the storage under a Locked store: whole records by storage
// key, and a lock per key. It knows nothing of claims and nonces; Locked
// makes every decision.
type Backend interface {
	// Load returns the record stored under key, or nil when there is none.
	// It may read without the key's lock, provided it never returns a
	// half-written record. A record that cannot be decoded is an error
	// matching ErrCorruptRecord.
	Load(ctx context.Context, key string) (*Record, error)
	// Update calls fn with the record stored under key (nil when there is
	// none) while holding a lock that excludes every other Update of key,
	// in every process the backend serves. When fn returns a record, Update
	// stores it under key before releasing the lock; when fn returns nil,
	// it writes nothing. An error from fn is returned as is, with nothing
	// written. A record that cannot be decoded is reported (matching
	// ErrCorruptRecord) without calling fn, so it is never replaced.
	// fn may keep cur and may modify neither cur nor the record it returns
	// after returning it; Update must not hand fn a record it will change,
	// and may keep the record fn returns as it is (Locked hands its callers
	// copies of the records it passes to and gets from Update).
	Update(ctx context.Context, key string, fn func(cur *Record) (*Record, error)) error
	// Delete removes the record under key whatever its state. Deleting a
	// missing record is not an error.
	Delete(ctx context.Context, key string) error
}

// LockedConfig configures NewLocked.
type LockedConfig struct {
	// Name prefixes error messages, such as "memstore".
	Name string
	// Now is the store's clock; default time.Now.
	Now func() time.Time
	// Changed, if set, is called after every write that may end a wait
	// (a claim, a takeover, a completion, a release, a delete), with the
	// lock released: a store that implements Watcher wakes its
	// watchers of key there.
	Changed func(key string)
}

// Locked is an Store made of a Backend: each operation reads the
// record under the key's lock, decides with DecideClaim or an Apply
// function, and writes the result before unlocking. A claim that finds a
// live record it must leave untouched (a replay, a duplicate) is answered
// from an unlocked Load and takes no lock at all.
type Locked struct {
	b       Backend
	name    string
	now     func() time.Time
	changed func(string)
}

var _ Store = (*Locked)(nil)

// NewLocked returns a Locked store over b.
func NewLocked(b Backend, cfg LockedConfig) *Locked {
	l := &Locked{b: b, name: cfg.Name, now: cfg.Now, changed: cfg.Changed}
	if l.name == "" {
		l.name = "storekit"
	}
	if l.now == nil {
		l.now = time.Now
	}
	return l
}

func (l *Locked) nowMs() int64 { return l.now().UnixMilli() }

func (l *Locked) notify(key string) {
	if l.changed != nil {
		l.changed(key)
	}
}

// Claim implements Store.
func (l *Locked) Claim(ctx context.Context, req ClaimRequest) (ClaimResult, error) {
	if err := ValidateClaim(req); err != nil {
		return ClaimResult{}, err
	}
	if err := ctx.Err(); err != nil {
		return ClaimResult{}, err
	}
	cur, err := l.b.Load(ctx, req.Key)
	if err != nil {
		return ClaimResult{}, err
	}
	gone := l.goneFunc(ctx)
	if cur != nil {
		if d := DecideClaimGone(cur, req, l.nowMs(), gone); !d.Write {
			return d.Result(), nil
		}
	}
	var d Decision
	err = l.b.Update(ctx, req.Key, func(cur *Record) (*Record, error) {
		d = DecideClaimGone(cur, req, l.nowMs(), gone)
		if !d.Write {
			return nil, nil
		}
		return d.Record, nil
	})
	if err != nil {
		return ClaimResult{}, err
	}
	if d.Write {
		l.notify(req.Key)
	}
	// The record is the one Update stored or read: the caller gets a copy.
	d.Record = d.Record.Clone()
	return d.Result(), nil
}

// Heartbeat implements Store.
func (l *Locked) Heartbeat(ctx context.Context, key, nonce string, leaseTTL time.Duration) error {
	return l.update(ctx, "heartbeat", key, nonce, false, func(cur *Record, now int64) (*Record, error) {
		return ApplyHeartbeat(cur, nonce, leaseTTL, now)
	})
}

// Complete implements Store.
func (l *Locked) Complete(ctx context.Context, key, nonce string, c Completion) error {
	if err := ValidateCompletion(c); err != nil {
		return err
	}
	return l.update(ctx, "complete", key, nonce, true, func(cur *Record, now int64) (*Record, error) {
		return ApplyComplete(cur, nonce, c, now)
	})
}

// Release implements Store. The record is kept with ExpiresAt = now,
// so the next claim goes on counting attempts.
func (l *Locked) Release(ctx context.Context, key, nonce string) error {
	return l.update(ctx, "release", key, nonce, true, func(cur *Record, now int64) (*Record, error) {
		return ApplyRelease(cur, nonce, now)
	})
}

func (l *Locked) update(ctx context.Context, op, key, nonce string, notify bool, apply func(*Record, int64) (*Record, error)) error {
	if err := ValidateOwner(key, nonce); err != nil {
		return fmt.Errorf("%s: %s %s: %w", l.name, op, key, err)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	err := l.b.Update(ctx, key, func(cur *Record) (*Record, error) {
		next, err := apply(cur, l.nowMs())
		if err != nil {
			return nil, fmt.Errorf("%s: %s %s: %w", l.name, op, key, err)
		}
		return next, nil
	})
	if err == nil && notify {
		l.notify(key)
	}
	return err
}

// Get implements Store: the live record, or ErrNotFound.
func (l *Locked) Get(ctx context.Context, key string) (*Record, error) {
	if err := ValidateKey(key); err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cur, err := l.b.Load(ctx, key)
	if err != nil {
		return nil, err
	}
	rec, err := Found(cur, l.nowMs())
	if err != nil {
		return nil, fmt.Errorf("%s: get %s: %w", l.name, key, err)
	}
	return rec, nil
}

// Delete implements Store.
func (l *Locked) Delete(ctx context.Context, key string) error {
	if err := ValidateKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := l.b.Delete(ctx, key); err != nil {
		return err
	}
	l.notify(key)
	return nil
}

// OwnerChecker is implemented by a Backend whose store has Presence: Gone
// reports whether the owner of a claim is known to be gone. It must say
// false whenever it cannot be sure.
type OwnerChecker interface {
	OwnerGone(ctx context.Context, owner string) bool
}

// goneFunc returns the backend's owner check, or nil.
func (l *Locked) goneFunc(ctx context.Context) func(string) bool {
	oc, ok := l.b.(OwnerChecker)
	if !ok {
		return nil
	}
	return func(owner string) bool { return oc.OwnerGone(ctx, owner) }
}
