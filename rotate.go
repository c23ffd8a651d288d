package idem

import (
	"context"
	"errors"
	"time"

	"github.com/idem-go/idem/storekit"
)

// Rotating the secret (WithSecret(active, previous...)).
//
// A call's key has one storage key per secret: keys[0] under the active
// secret, then one under each previous secret. Records are written under
// the key a process claims first, its active one; a call whose claim
// under it finds a live record is answered from that record as without
// rotation (one round trip for a replay). A call that gets the claim
// (fresh, or a takeover) settles it against every other key before fn
// runs (settle): it reads each with Get, and where nothing is live, the
// key's steps epoch too (two round trips apiece); nothing found means fn
// runs under the claim. So a fresh call costs 2 + 2×len(previous) round
// trips.
//
// A call's past stays under the key it was first claimed under: its steps
// (keyed from that storage key), its fencing tokens (that record's
// attempts). A crashed owner leaves a live (stale) claim there, which Get
// sees; a released claim is not live, so before a Guard with a secret
// releases a claim under which fn ran (or one that took over a stale
// claim), it makes sure the key has a steps epoch (keepHistory), and the
// epoch, which Get does see, marks the key as the call's home. (Every
// Guard with a secret does, not only one with previous secrets: a call
// released before a rotation began may be retried in its second deploy.)
//
// What settle does with what it finds under another key k, while it holds
// its claim c:
//
//   - nothing live and no steps epoch: next key.
//   - nothing live but a steps epoch: the call has a past under k (a
//     release): settle claims k and the call moves there, as for a
//     takeover below.
//   - a completed or failed record: c is released and that record answers
//     the call (replay, ErrPreviousFailure, ErrPayloadMismatch).
//   - an in-progress record: settle claims k itself, so that the store
//     decides atomically, as for any claim, and goes by what that claim
//     returns (the next four items).
//   - a takeover (the record was stale): the call moves to k: c is
//     released, fn will run under the claim on k (attempt + 1, so the
//     fencing token goes on counting; steps derive from k, so they
//     replay), and the other keys are settled again against k.
//   - a fresh claim (the record went away meanwhile): released at once,
//     and k counts as empty, unless k has a steps epoch (the record was
//     released): then the call moves to k.
//   - a live record with another payload: c is released,
//     ErrPayloadMismatch.
//   - a live record, and k sorts before c's key: c yields: it is released,
//     and the record answers as a call in progress does (ErrInProgress, or
//     under Wait a wait on k and then the whole call again).
//   - a live record, and k sorts after c's key: c waits, held (heartbeats
//     keep it fresh), until k holds no live claim, then looks again.
//     Under Return and Raise the wait lasts at most one heartbeat interval,
//     then c is released and the answer is ErrInProgress.
//
// Why fn runs at most once (a proof). A process "runs fn under c on key X"
// only after, holding c without interruption since it was written at w,
// it read every other key at some t > w and found no live record there
// (Get found none, or a claim there was fresh and was released). Take two
// processes P and Q that run fn concurrently under claims cP on X and cQ on
// Y, X != Y, both keys known to both (the rotation procedure ensures it).
// cQ is live from wQ until Q's fn ends, so P's read of Y, before P's fn
// began and so before Q's fn ended, found nothing only if tP < wQ.
// Likewise tQ < wP. With wP < tP and wQ < tQ that gives wP < tP < wQ < tQ
// < wP: impossible. Two processes with the same key are kept apart by the
// store's claim itself. A claim taken over because it was stale is the
// ordinary takeover (its owner's fn was cancelled before it could go
// stale). This holds whatever each process does when it sees the other's
// claim in progress, as long as it does not run fn on that sight: the
// tie-break below is for progress, not for safety.
//
// Why somebody runs it (progress). When P (on X) and Q (on Y) each see the
// other's claim, both apply one rule: the smaller storage key waits, the
// larger yields. Say X < Y: Q releases cQ and follows X; P waits, holding
// cP, until Y is empty, finds it so and runs fn. If only one saw the
// other, the one that saw nothing runs fn and the other either yields or
// waits until fn is done and follows its record. Waits only ever go from a
// smaller key to a larger one, so no two processes wait on each other. A
// wait is bounded: the claim waited on belongs to a process that yields at
// once, or runs fn (heartbeats bound it), or died (its claim goes stale and
// is taken over).
//
// A process that never looks under a key another process writes under
// (a Guard with only the new secret while one with only the old one still
// runs) is outside the procedure: WithSecret's documentation says which
// configurations may run side by side.

// altKey is a call's storage key and payload hash under one secret.
type altKey struct{ sk, ph string }

// rotationKeys returns the storage keys and payload hashes of key under
// every secret of the Guard, active first (sk and ph, already derived), or
// nil when the Guard has no previous secret.
func (e *engine) rotationKeys(key, sk, ph string, cc callConfig) ([]altKey, error) {
	if len(e.prev) == 0 {
		return nil, nil
	}
	keys := make([]altKey, 1, 1+len(e.prev))
	keys[0] = altKey{sk: sk, ph: ph}
	for _, k := range e.prev {
		psk, err := k.storageKey(key)
		if err != nil {
			return nil, err
		}
		pph := ""
		if cc.hasPayload {
			if pph, err = k.payloadHash(cc.payload); err != nil {
				return nil, err
			}
		}
		keys = append(keys, altKey{sk: psk, ph: pph})
	}
	return keys, nil
}

// settle settles the claim own, made (and held) under the active key,
// against the call's other keys (see the comment above). It returns the
// claim fn runs under (own, or one made under another key, held), or the
// record that answers the call with the payload hash under that record's
// secret, or errRestart when the call must start over (a claim was lost or
// may have lapsed while it waited). Every claim it does not return is
// dropped.
func (e *engine) settle(ctx context.Context, own *claim, keys []altKey) (c *claim, ans found, err error) {
	c = own
	for moved := true; moved; {
		moved = false
	scan:
		for _, k := range keys {
			if k.sk == c.sk {
				continue
			}
			r, err := e.store.Get(ctx, k.sk)
			history := false
			switch {
			case errors.Is(err, storekit.ErrNotFound):
				// Nothing live under k; the call may still have a past
				// there (a release, and its steps): its epoch says so.
				if history, err = e.hasEpoch(ctx, k.sk); err != nil {
					c.drop()
					return nil, found{}, err
				}
				if !history {
					continue
				}
			case err != nil:
				c.drop()
				return nil, found{}, storeErr("get", err)
			case r.Status != storekit.StatusInProgress:
				c.drop()
				return nil, found{r, k.ph}, nil
			}
			o, r, err := e.settleLive(ctx, c, k, history)
			switch {
			case err != nil:
				c.drop()
				if errors.Is(err, errRestart) {
					return nil, found{}, errRestart
				}
				return nil, found{}, err
			case o != nil: // the call moves to k, where its past is
				c.drop()
				o.hold(o.callContext())
				c, moved = o, true
				break scan
			case r != nil:
				c.drop()
				return nil, found{r, k.ph}, nil
			}
		}
	}
	return c, found{}, nil
}

// found is a record that answers a call under another of its keys, with
// the call's payload hash under that key's secret.
type found struct {
	rec *storekit.Record
	ph  string
}

// errRestart says that the claim being settled was lost, or may have
// lapsed, while it waited.
var errRestart = errors.New("idem: claim lost while settling a rotation")

// settleLive deals with the record found under k while c is held: a live
// in-progress one, or (history) none live but the call's epoch. It returns
// a claim made under k that fn is to run under (a takeover, or a claim
// where the call has a past), or the record that answers the call, or
// neither when k holds no live record and no past (fn may run under c as
// far as k is concerned). c is left as it is; errRestart means it was
// lost or may have lapsed.
func (e *engine) settleLive(ctx context.Context, c *claim, k altKey, history bool) (*claim, *storekit.Record, error) {
	var (
		w        *waiter
		deadline time.Time // zero under Wait: the caller's ctx bounds the wait
	)
	defer func() {
		if w != nil {
			w.close()
		}
	}()
	for {
		o, r, err := e.tryClaim(ctx, k.sk, k.ph)
		switch {
		case err != nil:
			return nil, nil, err
		case o != nil && (o.took || history):
			return o, nil, nil
		case o != nil:
			// Nothing live under k any more. If the call was released
			// there, its epoch is there (see keepHistory), and so is the
			// call's home.
			h, err := e.hasEpoch(ctx, k.sk)
			if err != nil || !h {
				o.drop()
				return nil, nil, err
			}
			return o, nil, nil
		case r.Status != storekit.StatusInProgress || r.PayloadHash != k.ph:
			return nil, r, nil
		case k.sk < c.sk: // the other claim wins: yield to it
			return nil, r, nil
		}
		// Ours wins: wait, holding it, for the other one to yield or end.
		if w == nil {
			w = e.newWaiter(k.sk)
			if e.dup != Wait {
				deadline = time.Now().Add(e.beat)
			}
		}
		expired, err := e.holdWait(ctx, c, w, r.Attempt, deadline)
		switch {
		case err != nil:
			return nil, nil, err
		case expired:
			return nil, r, nil
		}
	}
}

// holdWait waits once on w while holding c (its heartbeat runs on, as it
// would while fn ran). expired is true once deadline (if not zero) has
// passed; a c that was lost or may have lapsed is errRestart.
func (e *engine) holdWait(ctx context.Context, c *claim, w *waiter, attempt int64, deadline time.Time) (expired bool, err error) {
	if !deadline.IsZero() && !time.Now().Before(deadline) {
		return true, nil
	}
	if c.fctx.Err() != nil || !c.hb.Valid() {
		return false, errRestart
	}
	w.limit = e.beat / 2
	if !deadline.IsZero() {
		w.limit = max(min(w.limit, time.Until(deadline)), time.Millisecond)
	}
	return false, w.wait(ctx, attempt)
}

// doneElsewhere returns the first completed or failed record of the call
// under one of its keys other than skip, with the payload hash under that
// key's secret, or nil when there is none.
func (e *engine) doneElsewhere(ctx context.Context, keys []altKey, skip string) (*storekit.Record, string, error) {
	for _, k := range keys {
		if k.sk == skip {
			continue
		}
		r, err := e.store.Get(ctx, k.sk)
		switch {
		case errors.Is(err, storekit.ErrNotFound):
			continue
		case err != nil:
			return nil, "", storeErr("get", err)
		case r.Status != storekit.StatusInProgress:
			return r, k.ph, nil
		}
	}
	return nil, "", nil
}

// asActive returns rec, found under a previous secret's key, as the flight
// and the local cache keep it: under the active key sk with the active
// payload hash ph, when rec's payload hash is rph (the call's payload
// under rec's secret). A record with another payload gives nil: a
// same-process caller then asks the store itself.
func asActive(rec *storekit.Record, sk, ph, rph string) *storekit.Record {
	if rec.PayloadHash != rph {
		return nil
	}
	cp := rec.Clone()
	cp.Key, cp.PayloadHash = sk, ph
	return cp
}
