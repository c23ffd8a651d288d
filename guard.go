package idem

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"sync"
	"time"

	"github.com/idem-go/idem/lease"
)

// Guard runs functions at most once per key, with their outcomes kept in a
// Store. It is safe for concurrent use; create one per operation (or per
// result type) and share it.
type Guard[T any] struct {
	store    Store
	watcher  Watcher // nil if the store cannot push changes
	keys     keyer
	ttl      time.Duration
	lease    time.Duration // lifetime of an in-progress record
	dup      DuplicatePolicy
	fail     FailurePolicy
	beat     time.Duration
	takeover time.Duration
	tenant   string // WithNamespace, handed to the store with each claim
	scope    string
	observer Observer
	codec    Codec
	sanitize func(T) T
	errType  func(error) string
	cache    *localCache // WithLocalCache, or nil

	mu      sync.Mutex
	flights map[string]*flight
}

// flight is the one store interaction for a key that all callers of it in
// this process share: one claim (and the fn it runs), or one wait.
type flight struct {
	payloadHash string
	running     bool          // the flight holds a claim and fn runs; set before decided closes
	decided     chan struct{} // closed once the flight runs fn or has finished
	waiting     chan struct{} // closed when the flight starts waiting on a live claim with its payload
	done        chan struct{} // closed when the flight has finished
	final       *Record       // set before done closes: the record that decides for followers, or nil
}

// New returns a Guard over store, configured by opts. It fails with an error
// matching ErrInvalidOption if an option (or the store's own configuration,
// for stores with a Validate() error method) is invalid.
func New[T any](store Store, opts ...Option) (*Guard[T], error) {
	if store == nil || (reflect.ValueOf(store).Kind() == reflect.Pointer && reflect.ValueOf(store).IsNil()) {
		return nil, &OptionError{Option: "store", Reason: "store is nil"}
	}
	c := config{ttl: DefaultTTL, takeoverAfter: DefaultTakeoverAfter, codec: JSON}
	for _, o := range opts {
		if o == nil {
			c.invalid("New", "nil option")
			continue
		}
		o(&c)
	}
	if c.heartbeat == 0 && c.takeoverAfter > 0 {
		c.heartbeat = min(DefaultHeartbeat, c.takeoverAfter/3)
	}
	if c.heartbeat > 0 && c.takeoverAfter > 0 && 2*c.heartbeat > c.takeoverAfter {
		c.invalid("WithHeartbeat", "interval %v must be at most half the takeover threshold %v", c.heartbeat, c.takeoverAfter)
	}
	if c.requireSecret && !c.secretSet {
		c.invalid("RequireSecret", "production mode needs WithSecret")
	}
	g := &Guard[T]{
		store: store, keys: newKeyer(c.tenant, c.scope, c.secret),
		ttl: c.ttl, lease: max(c.ttl, 2*c.takeoverAfter), dup: c.dup, fail: c.fail,
		beat: c.heartbeat, takeover: c.takeoverAfter, tenant: c.tenant, scope: c.scope, observer: c.observer, codec: c.codec,
		errType: c.errorType, flights: make(map[string]*flight),
	}
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
	if v, ok := store.(interface{ Validate() error }); ok {
		if err := v.Validate(); err != nil {
			c.errs = append(c.errs, err)
		}
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	if w, ok := store.(Watcher); ok {
		g.watcher = w
	}
	if c.cacheEntries > 0 {
		g.cache = newLocalCache(c.cacheEntries, c.cacheMaxAge)
	}
	return g, nil
}

type fencingKey struct{}

// FencingToken returns the attempt number of the claim under which fn runs:
// 1 for the first claim of a key, one more for every takeover or re-claim
// while the record is kept. Pass it to a downstream system that rejects a
// token lower than one it has seen, and a stale owner can do no harm there
// either.
func FencingToken(ctx context.Context) (int64, bool) {
	t, ok := ctx.Value(fencingKey{}).(int64)
	return t, ok
}

// StorageKey returns the storage key for key under this Guard's namespace
// and secret: what the store and the Observer see instead of key.
func (g *Guard[T]) StorageKey(key string) (string, error) { return g.keys.storageKey(key) }

// Do runs fn at most once for key. The first caller's claim runs fn; every
// duplicate (in this process or another, while the record lives) gets the
// stored outcome or an error, as the duplicate policy says. See the package
// documentation for the full rules.
func (g *Guard[T]) Do(ctx context.Context, key string, fn func(context.Context) (T, error), opts ...CallOption) (T, error) {
	var zero T
	sk, err := g.keys.storageKey(key)
	if err != nil {
		return zero, err
	}
	if fn == nil {
		return zero, errors.New("idem: Do: fn is nil")
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
	for {
		g.mu.Lock()
		f, ok := g.flights[sk]
		if !ok {
			// A flight that ended since the look above filled the cache
			// before it left the map: look again rather than read the store.
			if rec := g.cached(sk); rec != nil {
				g.mu.Unlock()
				v, err, _ := g.decide(ctx, rec, ph)
				return v, err
			}
			f = &flight{payloadHash: ph, decided: make(chan struct{}), waiting: make(chan struct{}), done: make(chan struct{})}
			g.flights[sk] = f
			g.mu.Unlock()
			v, err, again := g.lead(ctx, sk, ph, f, fn)
			if !again {
				return v, err
			}
			continue
		}
		g.mu.Unlock()
		v, err, again := g.follow(ctx, sk, ph, f)
		if !again {
			return v, err
		}
	}
}

// follow makes a same-process duplicate share the flight f: it is told what
// a caller in another process would be told, without a store round trip.
func (g *Guard[T]) follow(ctx context.Context, sk, ph string, f *flight) (v T, err error, again bool) {
	var waitStart time.Time // set when this caller waits on the flight's fn
	select {
	case <-f.decided:
	case <-f.waiting:
		// The flight waits on a live claim made with its payload: a caller
		// with another payload is told so now, as the store would tell it.
		if f.payloadHash != ph {
			g.observe(ctx, Event{Kind: EventPayloadMismatch, StorageKey: sk})
			return v, ErrPayloadMismatch, false
		}
		select {
		case <-f.decided:
		case <-ctx.Done():
			return v, g.waitCancelled(ctx), false
		}
	case <-ctx.Done():
		return v, g.waitCancelled(ctx), false
	}
	if f.running {
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
	case <-f.done:
		g.waitDone(ctx, sk, 0, !waitStart.IsZero(), waitStart)
	case <-ctx.Done():
		return v, g.waitCancelled(ctx), false
	}
	if f.final == nil {
		return v, nil, true
	}
	return g.decide(ctx, f.final, ph)
}

// waitCancelled is the error of a caller whose context ended while the key
// was still being worked on.
func (g *Guard[T]) waitCancelled(ctx context.Context) error {
	return fmt.Errorf("%w: %w", ErrInProgress, context.Cause(ctx))
}

// decide turns a record that this call did not claim into the call's answer;
// again is true when a waiting caller should look again.
func (g *Guard[T]) decide(ctx context.Context, rec *Record, ph string) (v T, err error, again bool) {
	if rec.PayloadHash != ph {
		g.observe(ctx, Event{Kind: EventPayloadMismatch, StorageKey: rec.Key, Attempt: rec.Attempt})
		return v, ErrPayloadMismatch, false
	}
	if err := rec.Validate(); err != nil { // a store that returned what it could not have stored
		return v, &CorruptRecordError{Key: rec.Key, Err: err}, false
	}
	switch rec.Status {
	case StatusCompleted:
		if g.dup == Raise {
			g.observe(ctx, Event{Kind: EventHit, StorageKey: rec.Key, Attempt: rec.Attempt})
			return v, &DuplicateError{StorageKey: rec.Key, Status: rec.Status, Attempt: rec.Attempt}, false
		}
		if rec.Error != nil {
			g.observe(ctx, Event{Kind: EventResultUnavailable, StorageKey: rec.Key, Attempt: rec.Attempt})
			return v, fmt.Errorf("%w: %s", ErrResultUnavailable, rec.Error.Message), false
		}
		if err := g.codec.Unmarshal(rec.Result, &v); err != nil {
			return v, &CorruptRecordError{Key: rec.Key, Err: fmt.Errorf("result does not decode: %w", err)}, false
		}
		g.observe(ctx, Event{Kind: EventHit, StorageKey: rec.Key, Attempt: rec.Attempt})
		return v, nil, false
	case StatusFailed:
		g.observe(ctx, Event{Kind: EventPreviousFailure, StorageKey: rec.Key, Attempt: rec.Attempt})
		se := &StoredError{Message: rec.Error.Message, Type: rec.Error.Type}
		if g.dup == Raise {
			return v, errors.Join(&DuplicateError{StorageKey: rec.Key, Status: rec.Status, Attempt: rec.Attempt}, se), false
		}
		return v, se, false
	default: // in progress
		if g.dup == Wait {
			return v, nil, true
		}
		return v, g.inProgress(ctx, rec.Key, rec.Attempt), false
	}
}

func (g *Guard[T]) inProgress(ctx context.Context, sk string, attempt int64) error {
	g.observe(ctx, Event{Kind: EventInProgress, StorageKey: sk, Attempt: attempt})
	if g.dup == Raise {
		return &DuplicateError{StorageKey: sk, Status: StatusInProgress, Attempt: attempt}
	}
	return ErrInProgress
}

// lead is the store interaction of a flight: claim, then run fn, replay, or
// wait. again is true when the caller should start over (a waited-for call
// was released or lost, or this caller's claim did not stick).
func (g *Guard[T]) lead(ctx context.Context, sk, ph string, f *flight, fn func(context.Context) (T, error)) (v T, err error, again bool) {
	defer func() {
		g.mu.Lock()
		delete(g.flights, sk)
		g.mu.Unlock()
		if !f.running {
			close(f.decided)
		}
		close(f.done)
	}()
	var (
		changed   <-chan struct{}
		stopWatch func()
		waiting   bool
		watchErr  bool // the store's Watch failed: this flight polls
		waitStart time.Time
		backoff   = pollMin
	)
	defer func() {
		if stopWatch != nil {
			stopWatch()
		}
	}()
	for {
		sent := time.Now() // the store's HeartbeatAt of a claim is no earlier
		res, err := g.store.Claim(ctx, ClaimRequest{
			Key: sk, Nonce: lease.Token(), PayloadHash: ph, LeaseTTL: g.lease, TakeoverAfter: g.takeover,
			Tenant: g.tenant, Scope: g.scope,
		})
		if err != nil {
			return v, storeErr("claim", err), false
		}
		rec := res.Record
		if rec == nil {
			return v, &StoreError{Op: "claim", Err: errors.New("store returned no record")}, false
		}
		if res.Outcome != Existing {
			kind := EventClaim
			if res.Outcome == TookOver {
				kind = EventTakeover
			}
			g.waitDone(ctx, sk, rec.Attempt, waiting, waitStart)
			g.observe(ctx, Event{Kind: kind, StorageKey: sk, Attempt: rec.Attempt})
			f.running = true
			close(f.decided)
			v, err = g.run(ctx, sk, rec, sent, f, fn)
			return v, err, false
		}
		v, err, wait := g.decide(ctx, rec, ph)
		if !wait {
			g.waitDone(ctx, sk, rec.Attempt, waiting, waitStart)
			if g.cache != nil {
				g.cache.put(rec, sent)
			}
			f.final = rec
			return v, err, false
		}
		// Wait for the live call to finish, then claim again.
		if !waiting {
			waiting, waitStart = true, time.Now()
			close(f.waiting)
			g.observe(ctx, Event{Kind: EventWait, StorageKey: sk, Attempt: rec.Attempt})
		}
		// A Watch that fails is not tried again by this flight: it polls
		// with backoff until it ends, and the next flight of the key tries
		// Watch afresh. Retrying on every poll would double the store
		// traffic of a wait exactly when the store is in trouble.
		if g.watcher != nil && stopWatch == nil && !watchErr {
			ch, stop, werr := g.watcher.Watch(ctx, sk)
			if werr == nil {
				changed, stopWatch = ch, stop
				continue // look again now that a change cannot be missed
			}
			watchErr = true
		}
		delay := lease.Jitter(backoff)
		if changed != nil {
			delay = lease.Jitter(g.safetyPoll())
		} else {
			backoff = min(2*backoff, g.pollMax())
		}
		t := time.NewTimer(delay)
		select {
		case <-changed:
			stopWatch()
			stopWatch, changed = nil, nil
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			g.observe(ctx, Event{Kind: EventInProgress, StorageKey: sk, Attempt: rec.Attempt, Duration: time.Since(waitStart)})
			return v, g.waitCancelled(ctx), false
		}
		t.Stop()
	}
}

const pollMin = 5 * time.Millisecond

// pollMax caps the polling interval of a waiter on a store that cannot push.
func (g *Guard[T]) pollMax() time.Duration {
	return min(max(g.takeover/8, 20*time.Millisecond), time.Second)
}

// safetyPoll is how often a waiter on a pushing store looks anyway: a
// crashed owner publishes nothing, so staleness is found by looking.
func (g *Guard[T]) safetyPoll() time.Duration {
	return min(max(g.takeover/4, 50*time.Millisecond), 5*time.Second)
}

// run executes fn under the claim rec: heartbeats while it runs, then
// records the outcome (or releases the claim) conditioned on the nonce.
func (g *Guard[T]) run(ctx context.Context, sk string, rec *Record, claimed time.Time, f *flight, fn func(context.Context) (T, error)) (v T, err error) {
	nonce, attempt := rec.Nonce, rec.Attempt
	fctx, cancel := context.WithCancelCause(context.WithValue(ctx, fencingKey{}, attempt))
	bg := context.WithoutCancel(ctx)
	start := time.Now()
	hb := g.heartbeat(bg, sk, nonce, attempt, claimed, cancel)

	// fn can end in three ways, told apart as singleflight does. It
	// returns: normalReturn is set. It panics: the deferred recover in the
	// inner function catches it, so the claim is released here, in fn's
	// goroutine, and the panic is raised again (recovered is set). It calls
	// runtime.Goexit: no recover sees that, the goroutine unwinds through
	// the outer defer with neither flag set, and the claim is released
	// there. Either way nothing is recorded as a result, and the heartbeat
	// is stopped before the release so that it cannot revive the claim.
	normalReturn, recovered := false, false
	var panicValue any
	defer func() {
		if !normalReturn && !recovered { // runtime.Goexit in fn
			hb.Stop()
			cancel(nil)
			g.abandon(bg, sk, nonce, attempt, start, errors.New("fn called runtime.Goexit"))
		}
	}()
	func() {
		defer func() {
			if !normalReturn {
				panicValue = recover()
			}
		}()
		v, err = fn(fctx)
		normalReturn = true
	}()
	if !normalReturn {
		recovered = true
		hb.Stop()
		cancel(nil)
		g.abandon(bg, sk, nonce, attempt, start, fmt.Errorf("fn panicked: %v", panicValue))
		panic(panicValue)
	}
	interrupted := fctx.Err() != nil // before cancel(nil) ends fctx anyway
	lost := hb.Stop()
	cancel(nil)
	if lost {
		g.observe(ctx, Event{Kind: EventLostOwnership, StorageKey: sk, Attempt: attempt, Duration: time.Since(start)})
		return v, joinErr(ErrLostOwnership, err)
	}
	if err != nil {
		g.observe(ctx, Event{Kind: EventFailure, StorageKey: sk, Attempt: attempt, Duration: time.Since(start), Err: err})
		return v, g.recordFailure(ctx, sk, nonce, attempt, err, interrupted, f, rec)
	}
	g.observe(ctx, Event{Kind: EventComplete, StorageKey: sk, Attempt: attempt, Duration: time.Since(start)})
	return v, g.complete(bg, sk, nonce, attempt, g.success(ctx, sk, attempt, v), f, rec)
}

// recordFailure ends a claim whose fn returned err: released under Unlock,
// stored under Lock. interrupted says fn's context had been cancelled (by
// its caller, or by the Guard when the claim could not be refreshed). It
// returns what Do returns beside fn's value.
func (g *Guard[T]) recordFailure(ctx context.Context, sk, nonce string, attempt int64, err error, interrupted bool, f *flight, rec *Record) error {
	bg := context.WithoutCancel(ctx)
	// A context error after fn's context was cancelled is the call being
	// given up, not an outcome of the operation: storing it under Lock
	// would refuse every retry for the record's TTL, so the claim is
	// released instead, as under Unlock.
	gaveUp := interrupted && (errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded))
	if g.fail == Unlock || gaveUp {
		rctx, rcancel := context.WithTimeout(bg, g.takeover)
		rerr := g.store.Release(rctx, sk, nonce)
		rcancel()
		if rerr != nil {
			return joinErr(err, g.ownershipOr(ctx, "release", rerr, sk, attempt))
		}
		return err
	}
	c := Completion{Status: StatusFailed, Error: storableError(err.Error(), g.errType(err), maxStoredMessage), TTL: g.ttl}
	return joinErr(err, g.complete(bg, sk, nonce, attempt, c, f, rec))
}

// success is the completion of a call whose fn returned v. A result that
// cannot be encoded (the codec fails, or the codec or sanitizer panics)
// completes the record without a result: fn's side effect happened, so the
// key must not run again, and replays get ErrResultUnavailable.
func (g *Guard[T]) success(ctx context.Context, sk string, attempt int64, v T) Completion {
	c := Completion{Status: StatusCompleted, TTL: g.ttl}
	b, err := g.encode(v)
	if err != nil {
		g.observe(ctx, Event{Kind: EventResultUnavailable, StorageKey: sk, Attempt: attempt, Err: err})
		c.Error = storableError("result could not be encoded: "+err.Error(), ResultUnavailableType, maxStoredMessage)
		return c
	}
	c.Result = b
	return c
}

// encode applies the sanitizer and the codec to v, turning a panic in
// either into an error.
func (g *Guard[T]) encode(v T) (b []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			b, err = nil, fmt.Errorf("encoder panicked: %v", p)
		}
	}()
	if g.sanitize != nil {
		v = g.sanitize(v)
	}
	return g.codec.Marshal(v)
}

// complete stores the outcome, retrying transient failures with backoff
// while the claim can still be ours (until a takeover could have happened).
// A completion the store refuses for good is replaced once by one without
// a result (see withoutResult), so the key still ends. When retries run
// out, the record is read back before answering: the last reply may have
// been lost after the write was applied. On success the flight's
// followers are handed the completed record.
func (g *Guard[T]) complete(ctx context.Context, sk, nonce string, attempt int64, c Completion, f *flight, rec *Record) error {
	deadline := time.Now().Add(g.takeover)
	backoff := 10 * time.Millisecond
	maybeApplied := false // a failed attempt may have reached the store
	for {
		actx, cancel := context.WithDeadline(ctx, deadline)
		err := g.store.Complete(actx, sk, nonce, c)
		cancel()
		if err == nil {
			g.completed(f, rec, c)
			return nil
		}
		if errors.Is(err, ErrLostOwnership) {
			g.observe(ctx, Event{Kind: EventLostOwnership, StorageKey: sk, Attempt: attempt})
			return fmt.Errorf("idem: complete refused: %w", err)
		}
		if errors.Is(err, ErrNotRecorded) {
			// The store applied the write but cannot vouch that it will
			// last (redisstore.WithReplicaAck: too few replicas hold it):
			// retrying or reading back would not change that.
			g.observe(ctx, Event{Kind: EventNotRecorded, StorageKey: sk, Attempt: attempt, Err: err})
			return err
		}
		if errors.Is(err, ErrPermanent) {
			// The store refused this value and would refuse it again: store
			// the smaller outcome instead, once, without waiting.
			if smaller, ok := withoutResult(c, err); ok {
				if c.Status == StatusCompleted {
					g.observe(ctx, Event{Kind: EventResultUnavailable, StorageKey: sk, Attempt: attempt, Err: err})
				}
				c = smaller
				continue
			}
		} else {
			maybeApplied = maybeApplied || !unsent(err)
		}
		wait := lease.Jitter(backoff)
		if errors.Is(err, ErrPermanent) || time.Now().Add(wait).After(deadline) {
			return g.notCompleted(ctx, sk, nonce, attempt, f, err, maybeApplied)
		}
		time.Sleep(wait)
		backoff = min(2*backoff, time.Second)
	}
}

// completed hands the flight's followers the record as c left it.
func (g *Guard[T]) completed(f *flight, rec *Record, c Completion) {
	final := rec.Clone()
	final.Status, final.Result, final.Error = c.Status, c.Result, c.Error
	f.final = final
}

// notCompleted answers a completion whose last attempt failed with err. It
// reads the record back first: if it carries this claim's outcome, the
// outcome was recorded after all (a reply was lost). If the record shows
// it was not, the answer is ErrNotRecorded; if the record cannot be read
// and an attempt may have been applied, nobody can know, and the answer is
// ErrOutcomeUnknown.
func (g *Guard[T]) notCompleted(ctx context.Context, sk, nonce string, attempt int64, f *flight, err error, maybeApplied bool) error {
	gctx, cancel := context.WithTimeout(ctx, max(g.beat, 250*time.Millisecond))
	cur, gerr := g.store.Get(gctx, sk)
	cancel()
	switch {
	case gerr == nil && cur.Nonce == nonce && cur.Status != StatusInProgress:
		f.final = cur
		return nil
	case gerr == nil || errors.Is(gerr, ErrNotFound) || !maybeApplied:
		g.observe(ctx, Event{Kind: EventNotRecorded, StorageKey: sk, Attempt: attempt, Err: err})
		return &NotRecordedError{Err: storeErr("complete", err)}
	default:
		g.observe(ctx, Event{Kind: EventNotRecorded, StorageKey: sk, Attempt: attempt, Err: err})
		return &OutcomeUnknownError{Err: storeErr("complete", err), ReadErr: gerr}
	}
}

// withoutResult returns the completion to store when the store refused c
// for good (refusal, its error): a success keeps its status without the
// result, as an unencodable one does; a failure keeps its type with a
// short message. ok is false when c is already that small.
func withoutResult(c Completion, refusal error) (Completion, bool) {
	if c.Status == StatusCompleted && c.Result != nil {
		msg := "result refused by the store: " + refusal.Error()
		return Completion{Status: StatusCompleted, Error: storableError(msg, ResultUnavailableType, minStoredMessage), TTL: c.TTL}, true
	}
	if c.Error != nil && len(c.Error.Message) > minStoredMessage {
		return Completion{Status: c.Status, Error: storableError(c.Error.Message, c.Error.Type, minStoredMessage), TTL: c.TTL}, true
	}
	return c, false
}

// unsent reports whether err says a request never reached the store (the
// connection could not be made), so it cannot have been applied.
func unsent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// abandon releases a claim whose fn panicked or exited.
func (g *Guard[T]) abandon(ctx context.Context, sk, nonce string, attempt int64, start time.Time, why error) {
	g.observe(ctx, Event{Kind: EventFailure, StorageKey: sk, Attempt: attempt, Duration: time.Since(start), Err: why})
	rctx, cancel := context.WithTimeout(ctx, g.takeover)
	defer cancel()
	if err := g.store.Release(rctx, sk, nonce); err != nil {
		_ = g.ownershipOr(ctx, "release", err, sk, attempt)
	}
}

func (g *Guard[T]) ownershipOr(ctx context.Context, op string, err error, sk string, attempt int64) error {
	if errors.Is(err, ErrLostOwnership) {
		g.observe(ctx, Event{Kind: EventLostOwnership, StorageKey: sk, Attempt: attempt})
		return fmt.Errorf("idem: %s refused: %w", op, err)
	}
	return storeErr(op, err)
}

// storeErr wraps a store failure in a *StoreError unless the store already
// returned one.
func storeErr(op string, err error) error {
	var se *StoreError
	if errors.As(err, &se) {
		return err
	}
	return &StoreError{Op: op, Err: err}
}

func joinErr(a, b error) error {
	if b == nil {
		return a
	}
	return errors.Join(a, b)
}

// heartbeat refreshes the claim on sk while fn runs (see lease.Refresher:
// a timer, not a goroutine, so a call that returns within one interval
// costs no heartbeat at all). Stop it with stop, which reports whether
// ownership was lost.
//
// If no heartbeat succeeds for takeover minus half an interval, another
// caller may take the claim over before the next one could tell: fn's
// context is cancelled with a *LapseError first. The lapse is counted from
// when the last successful refresh was sent (the store's HeartbeatAt is no
// earlier), and leaves half an interval, not a whole one, so that the next
// heartbeat has time to succeed even when the interval is half the
// threshold.
func (g *Guard[T]) heartbeat(ctx context.Context, sk, nonce string, attempt int64, claimed time.Time, cancel context.CancelCauseFunc) *lease.Refresher {
	return lease.Start(ctx, cancel, claimed, g.takeover, lease.Config{
		Interval: g.beat,
		Margin:   g.beat / 2,
		Refresh: func(hctx context.Context) (time.Duration, error) {
			return g.takeover, g.store.Heartbeat(hctx, sk, nonce, g.lease)
		},
		Lost: func(err error) error {
			if errors.Is(err, ErrLostOwnership) {
				return fmt.Errorf("idem: claim taken over: %w", ErrLostOwnership)
			}
			return nil
		},
		OnRefresh: func(left time.Duration) {
			g.observe(ctx, Event{Kind: EventRefresh, StorageKey: sk, Attempt: attempt, Duration: left})
		},
		OnError: func(err error) {
			g.observe(ctx, Event{Kind: EventHeartbeatError, StorageKey: sk, Attempt: attempt, Err: err})
		},
		OnLapse: func(since time.Duration, _ error) error {
			g.observe(ctx, Event{Kind: EventLapse, StorageKey: sk, Attempt: attempt, Duration: max(g.takeover-since, 0)})
			return &LapseError{Since: since.Round(time.Millisecond)}
		},
	})
}

func (g *Guard[T]) observe(ctx context.Context, e Event) {
	if g.observer != nil {
		e.Scope = g.scope
		g.observer.Observe(ctx, e)
	}
}

// cached returns the local cache's record for sk, or nil.
func (g *Guard[T]) cached(sk string) *Record {
	if g.cache == nil {
		return nil
	}
	return g.cache.get(sk)
}

// waitDone reports the end of a wait that started at start, if waited.
func (g *Guard[T]) waitDone(ctx context.Context, sk string, attempt int64, waited bool, start time.Time) {
	if waited {
		g.observe(ctx, Event{Kind: EventWaitDone, StorageKey: sk, Attempt: attempt, Duration: time.Since(start)})
	}
}

// Wrap returns fn guarded by g, keyed by Key(name, arg): calling the result
// twice with equal arguments runs fn once.
func Wrap[A, T any](g *Guard[T], name string, fn func(context.Context, A) (T, error)) func(context.Context, A) (T, error) {
	return func(ctx context.Context, a A) (T, error) {
		k, err := Key(name, a)
		if err != nil {
			var zero T
			return zero, err
		}
		return g.Do(ctx, k, func(ctx context.Context) (T, error) { return fn(ctx, a) })
	}
}
