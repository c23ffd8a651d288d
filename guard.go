package idem

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"time"

	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/lease"
	"github.com/idem-go/idem/storekit"
)

// Guard runs functions at most once per key, with their outcomes kept in a
// Store. It is safe for concurrent use: make one with New per operation (or
// result type) and share it. The zero Guard and a nil *Guard are not
// usable: their methods return an error matching ErrInvalidOption.
type Guard[T any] struct {
	engine
	sanitize func(T) T
	cache    *localCache // WithLocalCache, or nil

	mu      sync.Mutex
	flights map[string]*flight
}

// fire fires a signal of a flight.
func (g *Guard[T]) fire(s *signal) {
	g.mu.Lock()
	s.fire()
	g.mu.Unlock()
}

// signals are a follower's channels of a flight's signals.
type signals struct{ decided, waiting, done, lapsed <-chan struct{} }

// New returns a Guard over store, configured by opts. It fails with an error
// matching ErrInvalidOption if an option (or the store's own configuration,
// for stores with a Validate() error method) is invalid.
func New[T any](store storekit.Store, opts ...Option) (*Guard[T], error) {
	if isNilStore(store) {
		return nil, &storekit.OptionError{Option: "store", Reason: "store is nil"}
	}
	c := config{ttl: defaultTTL, takeoverAfter: defaultTakeoverAfter, dup: Return, fail: Unlock, codec: jsonCodec{}}
	for _, o := range opts {
		if o == nil {
			c.invalid("New", "nil option")
			continue
		}
		o(&c)
	}
	if c.heartbeat == 0 && c.takeoverAfter > 0 {
		c.heartbeat = min(defaultHeartbeat, c.takeoverAfter/3)
	}
	if c.heartbeat > 0 && c.takeoverAfter > 0 && 2*c.heartbeat > c.takeoverAfter {
		c.invalid("WithHeartbeat", "interval %v must be at most half the takeover threshold %v", c.heartbeat, c.takeoverAfter)
	}
	if c.requireSecret && !c.secretSet {
		c.invalid("RequireSecret", "production mode needs WithSecret")
	}
	g := &Guard[T]{engine: engine{
		store: store, keys: newKeyer(c.tenant, c.scope, c.secret),
		ttl: c.ttl, lease: max(c.ttl, 2*c.takeoverAfter), dup: c.dup, fail: c.fail,
		beat: c.heartbeat, takeover: c.takeoverAfter, tenant: c.tenant, scope: c.scope, observer: both(c.logger, c.observer), codec: c.codec,
		errType: c.errorType,
	}, flights: make(map[string]*flight)}
	if c.sanitize != nil {
		s, ok := c.sanitize.(func(T) T)
		if !ok {
			var zero T
			c.invalid("WithSanitize", "function is %T, want func(%T) %T", c.sanitize, zero, zero)
		}
		g.sanitize = s
	}
	if g.errType == nil {
		g.errType = func(err error) string { return fmt.Sprintf("%T", err) }
	}
	c.errs = storableType[T](c.codec, c.errs)
	if v, ok := store.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			c.errs = append(c.errs, err)
		}
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	for _, p := range c.previous {
		g.prev = append(g.prev, newKeyer(c.tenant, c.scope, p))
	}
	if w, ok := store.(storekit.Watcher); ok {
		g.watcher = w
	}
	token := ""
	if p, ok := store.(storekit.Presence); ok {
		token = p.Owner()
	}
	g.presence = token != ""
	g.owner = storekit.FormatOwner(c.instance, incarnation, token)
	if c.cacheEntries > 0 {
		g.cache = newLocalCache(c.cacheEntries, c.cacheMaxAge)
	}
	return g, nil
}

// Do runs fn at most once for key: the first caller's claim runs fn, and
// every duplicate, in this process or another, gets the stored outcome or
// an error, as the duplicate policy says. A nil or zero Guard, a nil ctx or
// a nil fn is an error matching ErrInvalidOption.
func (g *Guard[T]) Do(ctx context.Context, key string, fn func(context.Context) (T, error), opts ...CallOption) (T, error) {
	if err := g.check(ctx, "Do"); err != nil {
		var zero T
		return zero, err
	}
	if fn == nil {
		var zero T
		return zero, errNilFunc("Do")
	}
	return g.call(ctx, key, opts, fn)
}

// check is the receiver and context check of every method that takes a
// context: a nil or zero Guard, or a nil ctx, is an error matching
// ErrInvalidOption that names method.
func (g *Guard[T]) check(ctx context.Context, method string) error {
	switch {
	case g == nil || g.store == nil:
		return errZeroGuard(method)
	case ctx == nil:
		return &storekit.OptionError{Option: method, Reason: "context is nil"}
	}
	return nil
}

// errNilFunc is the error of a method given a nil function.
func errNilFunc(method string) error {
	return &storekit.OptionError{Option: method, Reason: "function is nil"}
}

// isNilStore reports whether store is nil, or a nil pointer inside the
// interface (a nil *memstore.Store passed as a Store), whose methods would
// panic on first use. The store's type is any the caller's (third-party
// stores included), so no typed check can see the nil pointer: reflection
// is the one general way, and New calls this once per Guard, never per
// call.
func isNilStore(store storekit.Store) bool {
	if store == nil {
		return true
	}
	v := reflect.ValueOf(store)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

func errZeroGuard(method string) error {
	return &storekit.OptionError{Option: method, Reason: "the Guard is nil or zero; make one with New"}
}

// callKeys are the storage keys of one call: sk under the active secret,
// with ph, the payload hash; alt, during a rotation, every key of the call
// (see rotationKeys), else nil.
type callKeys struct {
	sk, ph string
	alt    []altKey
}

// call runs one call of key: the same-process flight, the claim, and under
// the claim, when this caller gets it, fn (inside the store's transaction
// when ctx asks for one: see storekit.WithTx).
func (g *Guard[T]) call(ctx context.Context, key string, opts []CallOption, fn func(context.Context) (T, error)) (T, error) {
	var zero T
	ctx, tx, err := g.openTx(ctx)
	if err != nil {
		return zero, err
	}
	sk, err := g.keys.storageKey(key)
	if err != nil {
		return zero, err
	}
	var cc callConfig
	for _, o := range opts {
		if o != nil {
			o(&cc)
		}
	}
	ph := ""
	if cc.hasPayload {
		if ph, err = g.keys.payloadHash(cc.payload); err != nil {
			return zero, err
		}
	}
	if rec := g.cached(sk); rec != nil { // completed or failed: decide never waits
		v, err, _ := g.decide(ctx, rec, ph)
		return v, err
	}
	alt, err := g.rotationKeys(key, sk, ph, cc)
	if err != nil {
		return zero, err
	}
	ck := callKeys{sk: sk, ph: ph, alt: alt}
	w := work[T]{fn: fn, encode: g.success, tx: tx}
	for {
		f, sig, rec := g.join(sk, ph)
		var (
			v     T
			again bool
		)
		switch {
		case rec != nil: // the cache was filled meanwhile
			v, err, _ = g.decide(ctx, rec, ph)
		case sig == nil:
			v, err, again = g.lead(ctx, ck, f, w)
		default:
			v, err, again = g.follow(ctx, sk, ph, f, *sig)
		}
		if !again {
			return v, err
		}
	}
}

// join returns the flight of sk. A follower also gets the channels of its
// signals; the caller that made the flight leads it (sig nil). A flight that ended
// since the caller looked at the cache filled the cache before it left the
// map: then the cached record is returned instead.
func (g *Guard[T]) join(sk, ph string) (f *flight, sig *signals, cached *storekit.Record) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if f, ok := g.flights[sk]; ok {
		return f, &signals{f.decided.wait(), f.waiting.wait(), f.done.wait(), f.lapsed.wait()}, nil
	}
	if rec := g.cached(sk); rec != nil {
		return nil, nil, rec
	}
	f = &flight{payloadHash: ph}
	g.flights[sk] = f
	return f, nil, nil
}

// land ends the flight f of sk: later callers start a flight of their own,
// followers read f.final.
func (g *Guard[T]) land(sk string, f *flight) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.flights[sk] == f {
		delete(g.flights, sk)
	}
	if !f.running {
		f.decided.fire()
	}
	f.done.fire()
}

// detach makes the flight f of sk, whose claim may have lapsed, let go of
// the key: later callers start a flight of their own (and ask the store),
// and its followers start over.
func (g *Guard[T]) detach(sk string, f *flight) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.flights[sk] == f {
		delete(g.flights, sk)
	}
	f.lapsed.fire()
}

// follow makes a same-process duplicate share the flight f: it is told what
// a caller in another process would be told, without a store round trip.
func (g *Guard[T]) follow(ctx context.Context, sk, ph string, f *flight, sig signals) (v T, err error, again bool) {
	var waitStart time.Time // set when this caller waits on the flight's fn
	select {
	case <-sig.decided:
	case <-sig.waiting:
		// The flight waits on a live claim made with its payload: a caller
		// with another payload is told so now, as the store would tell it.
		if f.payloadHash != ph {
			g.observe(ctx, Event{Kind: EventPayloadMismatch, StorageKey: sk})
			return v, ErrPayloadMismatch, false
		}
		select {
		case <-sig.decided:
		case <-ctx.Done():
			return v, waitCancelled(ctx), false
		}
	case <-ctx.Done():
		return v, waitCancelled(ctx), false
	}
	if f.running {
		select {
		case <-sig.lapsed: // the flight's claim may have lapsed: ask the store
			return v, nil, true
		default:
		}
		if f.payloadHash != ph {
			g.observe(ctx, Event{Kind: EventPayloadMismatch, StorageKey: sk})
			return v, ErrPayloadMismatch, false
		}
		if g.dup != Wait {
			return v, g.inProgress(ctx, sk, 0), false
		}
		g.observe(ctx, Event{Kind: EventWait, StorageKey: sk})
		waitStart = time.Now()
	}
	select {
	case <-sig.done:
		if !waitStart.IsZero() {
			g.observe(ctx, Event{Kind: EventWaitDone, StorageKey: sk, Duration: time.Since(waitStart)})
		}
	case <-sig.lapsed:
		return v, nil, true
	case <-ctx.Done():
		return v, waitCancelled(ctx), false
	}
	if f.final == nil {
		return v, nil, true
	}
	return g.decide(ctx, f.final, ph)
}

// decide turns a record that this call did not claim into the call's answer;
// again is true when a waiting caller should look again.
func (g *Guard[T]) decide(ctx context.Context, rec *storekit.Record, ph string) (v T, err error, again bool) {
	if rec.PayloadHash != ph {
		g.observe(ctx, Event{Kind: EventPayloadMismatch, StorageKey: rec.Key, Attempt: rec.Attempt})
		return v, ErrPayloadMismatch, false
	}
	if err := rec.Validate(); err != nil { // a store that returned what it could not have stored
		return v, &storekit.CorruptRecordError{Key: rec.Key, Err: err}, false
	}
	switch rec.Status {
	case storekit.StatusCompleted:
		if g.dup == Raise {
			g.observe(ctx, Event{Kind: EventHit, StorageKey: rec.Key, Attempt: rec.Attempt})
			return v, &duplicateError{StorageKey: rec.Key, Status: rec.Status, Attempt: rec.Attempt}, false
		}
		v, err = decodeResult[T](g.codec, rec)
		if err == nil || errors.Is(err, ErrResultUnavailable) {
			g.observe(ctx, Event{Kind: hitOr(err), StorageKey: rec.Key, Attempt: rec.Attempt})
		}
		return v, err, false
	case storekit.StatusFailed:
		g.observe(ctx, Event{Kind: EventPreviousFailure, StorageKey: rec.Key, Attempt: rec.Attempt})
		se := &RecordedFailure{Message: rec.Error.Message, Type: rec.Error.Type}
		if g.dup == Raise {
			return v, errors.Join(&duplicateError{StorageKey: rec.Key, Status: rec.Status, Attempt: rec.Attempt}, se), false
		}
		return v, se, false
	default: // in progress
		if g.dup == Wait {
			return v, nil, true
		}
		return v, g.inProgress(ctx, rec.Key, rec.Attempt), false
	}
}

// hitOr is the event of a replay that decoded (err nil) or had no result.
func hitOr(err error) EventKind {
	if err != nil {
		return EventResultUnavailable
	}
	return EventHit
}

func (g *Guard[T]) inProgress(ctx context.Context, sk string, attempt int64) error {
	g.observe(ctx, Event{Kind: EventInProgress, StorageKey: sk, Attempt: attempt})
	if g.dup == Raise {
		return &duplicateError{StorageKey: sk, Status: storekit.StatusInProgress, Attempt: attempt}
	}
	return ErrInProgress
}

// lead is the store interaction of a flight: claim, then run body, replay,
// or wait. again is true when the caller should start over (a waited-for
// call was released or lost, or this caller's claim did not stick).
//
// ck.alt is nil unless the Guard has previous secrets (see rotationKeys):
// then a claim under the active key is settled against the other keys (see
// settle) before fn runs, and the record that answers the call, or the
// claim fn runs under, may be under a previous secret's key.
func (g *Guard[T]) lead(ctx context.Context, ck callKeys, f *flight, w work[T]) (v T, err error, again bool) {
	defer g.land(ck.sk, f)
	ws := &waits{e: &g.engine, active: g.newWaiter(ck.sk)}
	defer ws.close()
	unheld := 0 // claims in a row that lapsed before fn could start
	raced := 0  // claims held in a transaction whose record was written by another caller first
	tc := g.txClaimer(w.tx, ck.alt != nil)
	for {
		sent := time.Now()
		c, ans, err := g.claimOrFind(ctx, ck, tc)
		switch {
		case errors.Is(err, errRestart):
			continue
		case errors.Is(err, storekit.ErrKeyBusy): // a live call's open transaction holds the key
			return v, g.inProgress(ctx, ck.sk, 0), false
		case err != nil:
			return v, err, false
		case c != nil:
			if !c.startWork() { // it may have lapsed: fn must not start under it
				c.drop()
				if unheld++; unheld == maxUnheld {
					return v, c.unheld(), false
				}
				continue
			}
			ws.done(ctx, c.rec.Attempt)
			v, err = g.runClaim(c, f, ck, w)
			if c.raced() && raced < maxRaced {
				// Held in its transaction, the claim met a record another
				// caller wrote since its read: nothing of it committed,
				// so the call looks at the key again (a replay, as a
				// duplicate would be answered).
				raced++
				continue
			}
			return v, err, false
		}
		rec := ans.rec
		v, err, wait := g.decide(ctx, rec, ans.ph)
		if !wait {
			ws.done(ctx, rec.Attempt)
			g.answered(rec, sent, ck, ans.ph, f)
			return v, err, false
		}
		// Wait for the live call to finish, then claim again.
		on := ws.on(rec.Key)
		if on.begin(ctx, rec.Attempt) {
			g.fire(&f.waiting)
		}
		if err := on.wait(ctx, rec.Attempt); err != nil {
			return v, err, false
		}
	}
}

// claimOrFind makes one claim of the call ck: it returns the claim, held
// (and, during a rotation, settled against the call's other keys), or the
// record that answers the call or stands in its way, with the call's
// payload hash under that record's secret. errRestart says to start over.
// With tc (see txClaimer) the claim is made inside the call's transaction.
func (g *Guard[T]) claimOrFind(ctx context.Context, ck callKeys, tc storekit.TxClaimer) (*claim, found, error) {
	var (
		c   *claim
		rec *storekit.Record
		err error
	)
	if tc != nil {
		c, rec, err = g.tryClaimTx(ctx, tc, ck.sk, ck.ph)
	} else {
		c, rec, err = g.tryClaim(ctx, ck.sk, ck.ph)
	}
	if err != nil {
		return nil, found{}, err
	}
	ans := found{rec: rec, ph: ck.ph}
	if c != nil {
		c.hold(c.callContext())
		if ck.alt == nil {
			return c, found{}, nil
		}
		if c, ans, err = g.settle(ctx, c, ck.alt); c != nil || err != nil {
			return c, ans, err
		}
	}
	if ck.alt != nil && ans.rec.Status == storekit.StatusInProgress {
		// During a rotation, the live claim under the active key may
		// be another caller's settling claim while the call's outcome
		// is recorded under another secret: that outcome answers.
		r, kph, err := g.doneElsewhere(ctx, ck.alt, ans.rec.Key)
		if err != nil {
			return nil, found{}, err
		}
		if r != nil {
			ans = found{rec: r, ph: kph}
		}
	}
	return nil, ans, nil
}

// runClaim runs the leader's call under its claim c: it announces the
// claim, tells the flight f's followers that fn runs, runs the work, ends
// the keepAlive pass of the call's steps, if one runs, and,
// when c is under a previous secret's storage key, gives f's final record
// the call's active key and payload hash.
func (g *Guard[T]) runClaim(c *claim, f *flight, ck callKeys, w work[T]) (v T, err error) {
	c.announce(EventClaim, EventTakeover)
	c.f = f
	c.setOnLapse(func() { g.detach(ck.sk, f) })
	f.running = true
	g.fire(&f.decided)
	v, err = runWork(c, w)
	if c.call != nil {
		c.call.settle() // nothing of the call writes after Do returns
	}
	if c.sk != ck.sk && f.final != nil {
		f.final = asActive(f.final, ck.sk, ck.ph, c.ph)
	}
	return v, err
}

// answered makes rec, the record that answered the call without a run
// (read with its payload hash rph, at sent), the flight f's final record,
// under the call's active storage key and payload hash, and keeps it in
// the local cache.
func (g *Guard[T]) answered(rec *storekit.Record, sent time.Time, ck callKeys, rph string, f *flight) {
	sk, ph := ck.sk, ck.ph
	if rec.Key != sk {
		rec = asActive(rec, sk, ph, rph)
	}
	if g.cache != nil && rec != nil {
		g.cache.put(rec, sent)
	}
	f.final = rec
}

// success is the completion of a call whose fn returned v. A result that
// cannot be encoded (the codec fails, or the codec or sanitizer panics)
// completes the record without a result: fn's side effect happened, so the
// key must not run again, and replays get ErrResultUnavailable.
func (g *Guard[T]) success(c *claim, v T) storekit.Completion {
	return c.success(func() ([]byte, error) {
		if g.sanitize != nil {
			v = g.sanitize(v)
		}
		return g.codec.Marshal(v)
	})
}

// cached returns the local cache's record for sk, or nil.
func (g *Guard[T]) cached(sk string) *storekit.Record {
	if g.cache == nil {
		return nil
	}
	return g.cache.get(sk)
}

// Wrap returns fn guarded by g, keyed by Key(name, arg): calling the result
// twice with equal arguments runs fn once.
func Wrap[A, T any](g *Guard[T], name string, fn func(context.Context, A) (T, error)) func(context.Context, A) (T, error) {
	return func(ctx context.Context, a A) (T, error) {
		if fn == nil {
			var zero T
			return zero, &storekit.OptionError{Option: "Wrap", Reason: "function is nil"}
		}
		k, err := Key(name, a)
		if err != nil {
			var zero T
			return zero, err
		}
		return g.Do(ctx, k, func(ctx context.Context) (T, error) { return fn(ctx, a) })
	}
}

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

// incarnation tells this process from an earlier one started with the same
// WithInstanceID: drawn once, when the process starts.
var incarnation = lease.Token()

// info is how g was configured, for the packages of this repository that
// build on idem (internal/guardinfo).
func (g *Guard[T]) info() (guardinfo.Info, bool) {
	if g == nil || g.store == nil {
		return guardinfo.Info{}, false
	}
	return guardinfo.Info{
		Wait: g.dup == Wait, Lock: g.fail == Lock, TTL: g.ttl, Heartbeat: g.beat, TakeoverAfter: g.takeover,
		Store: g.store, StorageKey: g.keys.storageKey,
	}, true
}

func init() {
	guardinfo.Of = func(g any) (guardinfo.Info, bool) {
		if gi, ok := g.(interface {
			info() (guardinfo.Info, bool)
		}); ok {
			return gi.info()
		}
		return guardinfo.Info{}, false
	}
}
