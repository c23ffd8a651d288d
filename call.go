package idem

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem/storekit"
)

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
	// passes is the keepAlive pass in the background, and stopPass ends
	// it: a call waits for it (settle) before it returns, so that nothing
	// of the call writes to the store after Do returns.
	passes   sync.WaitGroup
	stopPass context.CancelFunc
}

// keptRecord is a step record a call keeps alive: its epoch (heartbeated,
// comp nil) or a finished step (its completion written again).
type keptRecord struct {
	key, nonce string
	comp       *storekit.Completion
}

// stepInfo marks a step's context: its downstream key.
type stepInfo struct{ key string }

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

// settle ends the call's keepAlive pass, if one runs, and waits for it.
func (sc *stepCall) settle() {
	sc.mu.Lock()
	if sc.stopPass != nil {
		sc.stopPass()
	}
	sc.mu.Unlock()
	sc.passes.Wait()
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
	ctx, sc.stopPass = context.WithCancel(ctx)
	sc.passes.Add(1)
	sc.mu.Unlock()
	go func() {
		defer sc.passes.Done()
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
