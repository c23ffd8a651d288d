package idem

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/lease"
)

// ErrNoCall: Step was called with a context that no Guard handed to a
// guarded fn (or with a step's own context: steps do not nest).
var ErrNoCall = errors.New("idem: Step outside a guarded call")

type callKey struct{}

type stepKey struct{}

// stepCall is what a guarded fn's context carries for Step: the call's
// storage key, and the steps epoch once the first Step of the attempt read
// it.
type stepCall struct {
	e       *engine
	sk      string          // the call's storage key
	ctx     context.Context // the caller's context: a step's work ends with it, not with the call's claim
	attempt int64

	mu    sync.Mutex
	epoch string
	// kept are the call's step records this attempt knows (its epoch, the
	// steps it ran or replayed), kept alive while the call lives (see
	// keepAlive); keptAt is when they were last made to live stepsLife.
	kept    []keptRecord
	keptAt  time.Time
	keeping atomic.Bool // a keepAlive pass runs
}

// keptRecord is a step record a call keeps alive: its epoch (heartbeated,
// comp nil) or a finished step (its completion written again).
type keptRecord struct {
	key, nonce string
	comp       *storekit.Completion
}

// stepInfo marks a step's context: its downstream key.
type stepInfo struct{ key string }

// callContext is the parent of a call's fn context: ctx with the call in
// it, for Step, and the claim's fencing token.
func (c *claim) callContext() context.Context {
	return &callCtx{Context: c.ctx, call: stepCall{e: c.e, sk: c.sk, ctx: c.ctx, attempt: c.rec.Attempt}}
}

// callCtx is a call's context values in one allocation: the call for Step
// and the fencing token, the call's attempt.
type callCtx struct {
	context.Context
	call stepCall
}

func (c *callCtx) Value(k any) any {
	switch k.(type) {
	case callKey:
		return &c.call
	case fencingKey:
		return c.call.attempt
	}
	return c.Context.Value(k)
}

// Step runs fn as a recorded step of the guarded call whose context is ctx
// (the context a Guard handed to fn), under name, and returns its result.
// A later attempt of the call, and a second Step of the same name, get the
// recorded result without running fn; a step whose fn returns an error is
// released, not recorded, and the error returned. Inside fn, StepKey(ctx)
// is the step's downstream key and FencingToken(ctx) its own attempt.
// Step with a context that no Guard handed to fn, or inside another step's
// fn (steps do not nest), is ErrNoCall; an empty name is ErrInvalidKey; a
// nil ctx or fn is ErrInvalidOption. See docs/steps-and-transactions.md.
func Step[V any](ctx context.Context, name string, fn func(context.Context) (V, error)) (V, error) {
	var zero V
	switch {
	case ctx == nil:
		return zero, &storekit.OptionError{Option: "Step", Reason: "context is nil"}
	case fn == nil:
		return zero, &storekit.OptionError{Option: "Step", Reason: "function is nil"}
	case name == "":
		return zero, &KeyError{Reason: "empty step name"}
	}
	sc, err := stepCallOf(ctx, "Step", name)
	if err != nil {
		return zero, err
	}
	ctx, tx, err := sc.e.openTx(ctx)
	if err != nil {
		return zero, err
	}
	s, err := newStep[V](ctx, sc, name)
	if err != nil {
		return zero, err
	}
	w := work[V]{fn: fn, encode: s.success, tx: tx, kept: s.kept}
	return s.do(ctx, func(c *claim) (V, error) {
		c.announce(EventStepRun, EventStepRun)
		return runWork(c, w)
	})
}

// newStep is the step name of the call sc, its keys derived under the
// call's steps epoch (read once per attempt).
func newStep[V any](ctx context.Context, sc *stepCall, name string) (*step[V], error) {
	epoch, err := sc.epochOf(ctx)
	if err != nil {
		return nil, err
	}
	return &step[V]{sc: sc, name: name, sk: derivedKey("idem/step/v1", sc.sk, epoch, name), key: stepKeyOf(sc.sk, epoch, name)}, nil
}

// stepCallOf returns the call of a guarded fn's context ctx, or an error
// for the caller op of step name (for the message; name "" for none):
// ErrNoCall outside one or inside a step's fn (steps do not nest).
func stepCallOf(ctx context.Context, op, name string) (*stepCall, error) {
	sc, _ := ctx.Value(callKey{}).(*stepCall)
	if sc == nil {
		return nil, ErrNoCall
	}
	if ctx.Value(stepKey{}) != nil {
		if name != "" {
			op += " " + strconv.Quote(name)
		}
		return nil, fmt.Errorf("%w: %s inside a step's fn (steps do not nest)", ErrNoCall, op)
	}
	return sc, nil
}

// StepKey returns, inside a step's fn, the step's downstream key: the same
// on every attempt of the call, different for every step, 64 characters of
// [0-9a-f] (fit for an Idempotency-Key header). ok is false outside a step.
func StepKey(ctx context.Context) (string, bool) {
	if ctx == nil {
		return "", false
	}
	si, ok := ctx.Value(stepKey{}).(*stepInfo)
	if !ok {
		return "", false
	}
	return si.key, true
}

// epochOf returns the call's steps epoch: the nonce of the call's epoch
// record, claimed by the first Step of an attempt (one round trip) and
// never taken over while it lives (its takeover threshold is its
// lifetime). Forget deletes it, so a forgotten call's old steps are
// orphaned and expire.
func (sc *stepCall) epochOf(ctx context.Context) (string, error) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.epoch != "" {
		return sc.epoch, nil
	}
	res, err := sc.e.claimEpoch(ctx, sc.sk)
	if err != nil {
		return "", err
	}
	sc.epoch = res.Record.Nonce
	sc.kept = append(sc.kept, keptRecord{key: res.Record.Key, nonce: sc.epoch})
	if res.Outcome == storekit.Claimed {
		sc.keptAt = time.Now() // new: it lives stepsLife from now
	} // else an earlier attempt's: kept alive at this attempt's first heartbeat
	return sc.epoch, nil
}

// hasEpoch reports whether this attempt has read or made the call's epoch.
func (sc *stepCall) hasEpoch() bool {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.epoch != ""
}

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

// How long a call's steps live.
//
// A call's steps epoch and its finished steps are written to live
// stepsLife, the Guard's TTL plus its lease (the longest a call's record
// lives past one claim, heartbeat or completion of it), and a call keeps
// them alive while it lives: each heartbeat of the call's claim, once
// stepsLife/4 has passed since they were last made to live stepsLife,
// makes the epoch and every step record the attempt knows (ran or replayed)
// live stepsLife again, in the background. So the records of an attempt's
// steps outlive its last heartbeat by at least 3/4 of stepsLife, and the
// next attempt (a takeover comes within a takeover threshold of the last
// heartbeat; a retry after a release within the call record's life)
// finds them: it reads the epoch at its first Step and keeps alive what
// it reads from then on. What an attempt must do to keep that true is
// reach each step that an earlier attempt finished within 3/4 of
// stepsLife of that attempt's end (with the defaults, 36 hours).

// stepsLife is how long a call's step records live past the last time the
// call made them live (see above).
func (e *engine) stepsLife() time.Duration { return e.ttl + e.lease }

// keep records a step record to keep alive with the call.
func (sc *stepCall) keep(key, nonce string, comp storekit.Completion) {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	for i := range sc.kept {
		if sc.kept[i].key == key {
			sc.kept[i] = keptRecord{key: key, nonce: nonce, comp: &comp}
			return
		}
	}
	sc.kept = append(sc.kept, keptRecord{key: key, nonce: nonce, comp: &comp})
}

// keepAlive makes the call's kept step records live stepsLife again when
// stepsLife/4 has passed since they last were, in the background (one
// pass at a time). The call's claim calls it after each successful
// heartbeat. A write that fails is tried again at the next heartbeat.
func (sc *stepCall) keepAlive(ctx context.Context) {
	life := sc.e.stepsLife()
	sc.mu.Lock()
	if len(sc.kept) == 0 || (!sc.keptAt.IsZero() && time.Since(sc.keptAt) < life/4) || !sc.keeping.CompareAndSwap(false, true) {
		sc.mu.Unlock()
		return
	}
	recs := slices.Clone(sc.kept)
	sc.mu.Unlock()
	go func() {
		defer sc.keeping.Store(false)
		began := time.Now()
		ok := true
		for _, r := range recs {
			wctx, cancel := context.WithTimeout(ctx, max(sc.e.takeover, time.Second))
			var err error
			if r.comp == nil {
				err = sc.e.store.Heartbeat(wctx, r.key, r.nonce, life)
			} else {
				comp := *r.comp
				comp.TTL = life
				err = sc.e.store.Complete(wctx, r.key, r.nonce, comp)
			}
			cancel()
			ok = ok && err == nil
		}
		if ok {
			sc.mu.Lock()
			sc.keptAt = began
			sc.mu.Unlock()
		}
	}()
}

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

// step is one Step call.
type step[V any] struct {
	sc   *stepCall
	name string
	sk   string // the step record's storage key
	key  string // StepKey
}

// do claims the step, then runs it under its claim with run, replays the
// recorded result, or waits for the live claim of another attempt to end.
func (s *step[V]) do(ctx context.Context, run func(c *claim) (V, error)) (v V, err error) {
	e := s.sc.e
	w := e.newWaiter(s.sk)
	defer w.close()
	unheld := 0 // claims in a row that lapsed before fn could start
	for {
		c, rec, _, err := e.tryClaim(ctx, s.sk, storekit.StepPayload)
		if err != nil {
			return v, err
		}
		if c != nil {
			c.step = true
			s.hold(c)
			if !c.startWork() { // it may have lapsed: fn must not start under it
				c.drop()
				if unheld++; unheld == maxUnheld {
					return v, c.unheld()
				}
				continue
			}
			w.done(ctx, c.rec.Attempt)
			return run(c)
		}
		if err := rec.Validate(); err != nil {
			return v, &storekit.CorruptRecordError{Key: rec.Key, Err: err}
		}
		switch rec.Status {
		case storekit.StatusCompleted:
			w.done(ctx, rec.Attempt)
			s.sc.keep(rec.Key, rec.Nonce, storekit.Completion{Status: rec.Status, Result: rec.Result, Error: rec.Error})
			v, err = decodeResult[V](e.codec, rec)
			e.observe(ctx, Event{Kind: EventStepReplayed, StorageKey: s.sk, Attempt: rec.Attempt, Err: err})
			return v, err
		case storekit.StatusFailed: // steps record no failures; a store that holds one says so
			return v, &RecordedFailure{Message: rec.Error.Message, Type: rec.Error.Type}
		}
		w.begin(ctx, rec.Attempt)
		if err := w.wait(ctx, rec.Attempt); err != nil {
			return v, err
		}
	}
}

// kept keeps the step's recorded completion alive with its call's (see
// keepAlive).
func (s *step[V]) kept(c *claim, comp storekit.Completion) {
	s.sc.keep(c.sk, c.rec.Nonce, comp)
}

// success is the completion of the step for v: its result with the Guard's
// codec, living stepsLife (see keepAlive).
func (s *step[V]) success(c *claim, v V) storekit.Completion {
	comp := c.success(func() ([]byte, error) { return c.e.codec.Marshal(v) })
	comp.TTL = c.e.stepsLife()
	return comp
}

// hold holds the step's claim c (see claim.hold) with a context that
// carries StepKey and the step's fencing token and is cancelled by the
// caller's context or the loss of c, not by the call's.
func (s *step[V]) hold(c *claim) {
	c.hold(detached{Context: s.sc.ctx, values: context.WithValue(c.ctx, stepKey{}, &stepInfo{key: s.key})})
}

// detached is a context whose values are those of values and whose
// cancellation and deadline are those of the embedded Context.
type detached struct {
	context.Context
	values context.Context
}

func (d detached) Value(k any) any { return d.values.Value(k) }

// Forget deletes key's record, whatever its state, and its steps (under
// every secret of WithSecret): a later call of key runs fn again from the
// start. A call still running keeps running; its completion is refused. A
// nil or zero Guard or a nil ctx is an error matching ErrInvalidOption.
func (g *Guard[T]) Forget(ctx context.Context, key string) error {
	if err := g.check(ctx, "Forget"); err != nil {
		return err
	}
	sk, err := g.keys.storageKey(key)
	if err != nil {
		return err
	}
	// During a rotation the key may be recorded under a previous secret:
	// delete it there too, or that record would still answer.
	keys, err := g.rotationKeys(key, sk, "", callConfig{})
	if err != nil {
		return err
	}
	if keys == nil {
		keys = []altKey{{sk: sk}}
	}
	for _, k := range keys {
		// The epoch first: a call record left behind by a failure here
		// still has its steps, so a retry replays them; the other way
		// round a new call could replay an old call's steps.
		if err := g.store.Delete(ctx, epochKey(k.sk)); err != nil {
			return storeErr("delete", err)
		}
		if err := g.store.Delete(ctx, k.sk); err != nil {
			return storeErr("delete", err)
		}
		if g.cache != nil {
			g.cache.remove(k.sk)
		}
	}
	return nil
}
