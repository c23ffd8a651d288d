package idem

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/idem-go/idem/storekit"
)

// ErrNoCall: Step was called with a context that no Guard handed to a
// guarded fn (or with a step's own context: steps do not nest).
var ErrNoCall = errors.New("idem: Step outside a guarded call")

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
		return zero, &storekit.KeyError{Reason: "empty step name"}
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
	if why, refused := storekit.StepsRefused(ctx); refused {
		return nil, &storekit.OptionError{Option: op, Reason: why}
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
		c, rec, err := e.tryClaim(ctx, s.sk, storekit.StepPayload)
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
