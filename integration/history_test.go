package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/anishathalye/porcupine"

	"github.com/idem-go/idem"
)

// historyLease is the lease of every claim and the TTL of every completion
// in a history: far longer than any history runs, so records end only by
// Release and Delete (see the model).
const historyLease = 10 * time.Minute

// clockSlack widens each operation's interval, in milliseconds, for the
// rounding of the stores' clocks to milliseconds.
const clockSlack = 1

// takeoverThresholds are the claims' thresholds: short ones that a
// history's claims cross, and one that never passes within a history.
var takeoverThresholds = []time.Duration{2 * time.Millisecond, 10 * time.Millisecond, 40 * time.Millisecond, historyLease}

// historyConfig shapes a random history.
type historyConfig struct {
	Clients int // concurrent clients
	Ops     int // operations per client
	Keys    int // storage keys the clients share
	// Cleans says the store was opened with retention 0 (a released
	// record may be removed at once, see the model's Clean-up): when the
	// store is a purger, one more client calls Purge beside the others
	// for as long as they run.
	Cleans bool
}

// purger is a store that removes expired records on request
// (storetest.Purger).
type purger interface {
	Purge(ctx context.Context) (int, error)
}

var defaultHistory = historyConfig{Clients: 4, Ops: 30, Keys: 3}

// knowledge is what the clients of one history have learnt about a key:
// every nonce claimed on it, and the owner the latest claim answered.
type knowledge struct {
	mu     sync.Mutex
	nonces []string
	owner  string
}

func (k *knowledge) add(nonce string) {
	k.mu.Lock()
	k.nonces = append(k.nonces, nonce)
	k.mu.Unlock()
}

func (k *knowledge) setOwner(nonce string) {
	k.mu.Lock()
	k.owner = nonce
	k.mu.Unlock()
}

// pick returns a nonce for a heartbeat, complete, release or retried claim:
// mostly the latest owner, else any nonce seen on the key, else one nobody
// claimed.
func (k *knowledge) pick(r *rand.Rand) string {
	k.mu.Lock()
	defer k.mu.Unlock()
	switch x := r.IntN(10); {
	case x < 6 && k.owner != "":
		return k.owner
	case x < 9 && len(k.nonces) > 0:
		return k.nonces[r.IntN(len(k.nonces))]
	}
	return "nobody"
}

// runHistory runs cfg.Clients clients of cfg.Ops random operations each on
// s, over fresh keys, and returns the history. Operations that fail with
// anything but ErrLostOwnership or ErrNotFound are returned as an error:
// on loopback servers there should be none, and the model cannot judge
// them.
func runHistory(ctx context.Context, s storekit.Store, cfg historyConfig, seed uint64) ([]porcupine.Operation, error) {
	h := &historyRun{ctx: ctx, s: s, cfg: cfg, seed: seed, start: make(chan struct{})}
	h.keys = make([]string, cfg.Keys)
	h.know = make([]*knowledge, cfg.Keys)
	for i := range h.keys {
		h.keys[i] = storageKey()
		h.know[i] = &knowledge{}
	}
	h.base = time.Now()
	var wg sync.WaitGroup
	if p, ok := s.(purger); ok && cfg.Cleans {
		wg.Add(1)
		go func() {
			defer wg.Done()
			h.purge(p)
		}()
	}
	for c := range cfg.Clients {
		wg.Add(1)
		h.running.Add(1)
		go func() {
			defer wg.Done()
			defer h.running.Done()
			h.client(c)
		}()
	}
	close(h.start)
	wg.Wait()
	return h.ops, errors.Join(h.errs...)
}

// A historyRun is one run of runHistory: its keys, what the clients know
// of them, and the history so far.
type historyRun struct {
	ctx     context.Context
	s       storekit.Store
	cfg     historyConfig
	seed    uint64
	keys    []string
	know    []*knowledge
	start   chan struct{} // closed when every client is ready
	base    time.Time
	running sync.WaitGroup // the clients but the purging one

	mu       sync.Mutex
	ops      []porcupine.Operation
	errs     []error
	nonceSeq int
}

func (h *historyRun) nextNonce() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.nonceSeq++
	return fmt.Sprintf("n%d", h.nonceSeq)
}

// purge is the purging client: it purges p's expired records, pausing
// between purges, until the other clients are done.
func (h *historyRun) purge(p purger) {
	c := h.cfg.Clients
	r := rand.New(rand.NewPCG(h.seed, uint64(c)))
	done := make(chan struct{})
	<-h.start
	go func() { h.running.Wait(); close(done) }()
	for {
		select {
		case <-done:
			return
		default:
		}
		began := time.Now()
		purged, err := applyPurge(h.ctx, p, h.keys, c, h.base)
		took := time.Since(began)
		h.mu.Lock()
		if err != nil {
			h.errs = append(h.errs, fmt.Errorf("client %d: purge: %w", c, err))
		}
		h.ops = append(h.ops, purged...)
		h.mu.Unlock()
		if err != nil {
			return
		}
		// Purge about a third of the time: often enough to meet
		// the others' claims on released records, seldom enough
		// that a Purge's locks (MySQL's gap locks) do not make
		// the history several times slower.
		// A timer sleeps far longer than a memstore Purge takes:
		// a short pause is a yield.
		if pause := time.Duration(r.Int64N(4*int64(took) + 1)); pause < 200*time.Microsecond {
			runtime.Gosched()
		} else {
			time.Sleep(pause)
		}
	}
}

// client is client c: cfg.Ops random operations on random keys.
func (h *historyRun) client(c int) {
	r := rand.New(rand.NewPCG(h.seed, uint64(c)))
	<-h.start
	for i := range h.cfg.Ops {
		ki := r.IntN(h.cfg.Keys)
		in := randomInput(r, h.keys[ki], h.know[ki], h.nextNonce, fmt.Sprintf("r%d.%d", c, i))
		in.Cleans = h.cfg.Cleans
		op, err := apply(h.ctx, h.s, in, c, h.base)
		if err != nil {
			h.mu.Lock()
			h.errs = append(h.errs, fmt.Errorf("client %d: %s: %w", c, describe(in, linOutput{}), err))
			h.mu.Unlock()
			return
		}
		out := op.Output.(linOutput)
		if in.Op == opClaim {
			h.know[ki].setOwner(out.Rec.Nonce)
		}
		h.mu.Lock()
		h.ops = append(h.ops, op)
		h.mu.Unlock()
	}
}

// randomInput draws one operation on key.
func randomInput(r *rand.Rand, key string, know *knowledge, fresh func() string, result string) linInput {
	in := linInput{Key: key}
	switch x := r.IntN(100); {
	case x < 35:
		in.Op = opClaim
		if r.IntN(4) == 0 {
			in.Nonce = know.pick(r)
		} else {
			in.Nonce = fresh()
			know.add(in.Nonce)
		}
		in.Payload = "a"
		if r.IntN(8) == 0 {
			in.Payload = "b"
		}
		in.TakeoverMs = takeoverThresholds[r.IntN(len(takeoverThresholds))].Milliseconds()
	case x < 52:
		in.Op = opHeartbeat
	case x < 68:
		in.Op = opComplete
		in.Status, in.Result = storekit.StatusCompleted, result
		if r.IntN(4) == 0 {
			in.Status = storekit.StatusFailed
		}
	case x < 84:
		in.Op = opRelease
	case x < 94:
		in.Op = opGet
	default:
		in.Op = opDelete
	}
	if in.Op == opHeartbeat || in.Op == opComplete || in.Op == opRelease {
		in.Nonce = know.pick(r)
	}
	return in
}

// apply runs in on s as client c and returns it as a porcupine operation,
// timed from base.
func apply(ctx context.Context, s storekit.Store, in linInput, c int, base time.Time) (porcupine.Operation, error) {
	var out linOutput
	var err error
	t0 := time.Now()
	switch in.Op {
	case opClaim:
		var res storekit.ClaimResult
		res, err = s.Claim(ctx, storekit.ClaimRequest{
			Key: in.Key, Nonce: in.Nonce, PayloadHash: in.Payload,
			LeaseTTL: historyLease, TakeoverAfter: time.Duration(in.TakeoverMs) * time.Millisecond,
		})
		if err == nil {
			out.Outcome, out.Rec = res.Outcome, viewOf(res.Record)
		}
	case opHeartbeat:
		err = s.Heartbeat(ctx, in.Key, in.Nonce, historyLease)
	case opComplete:
		cpl := storekit.Completion{Status: in.Status, TTL: historyLease}
		if in.Status == storekit.StatusFailed {
			cpl.Error = &idem.RecordedFailure{Message: in.Result, Type: "test"}
		} else {
			cpl.Result = []byte(in.Result)
		}
		err = s.Complete(ctx, in.Key, in.Nonce, cpl)
	case opRelease:
		err = s.Release(ctx, in.Key, in.Nonce)
	case opGet:
		var rec *storekit.Record
		rec, err = s.Get(ctx, in.Key)
		if err == nil {
			out.Rec = viewOf(rec)
		}
	case opDelete:
		err = s.Delete(ctx, in.Key)
	}
	t1 := time.Now()
	switch {
	case err == nil:
	case errors.Is(err, idem.ErrLostOwnership) && (in.Op == opHeartbeat || in.Op == opComplete || in.Op == opRelease):
		out.Err, err = errLost, nil
	case errors.Is(err, storekit.ErrNotFound) && in.Op == opGet:
		out.Err, err = errNotFound, nil
	}
	if err != nil {
		return porcupine.Operation{}, err
	}
	in.NowLo = t0.UnixMilli() - clockSlack
	out.NowHi = t1.UnixMilli() + clockSlack
	return porcupine.Operation{
		ClientId: c,
		Input:    in,
		Call:     t0.Sub(base).Nanoseconds(),
		Output:   out,
		Return:   t1.Sub(base).Nanoseconds(),
	}, nil
}

// applyPurge runs one Purge on p as client c, and returns it as one
// operation on each key (a Purge is not atomic across keys: on each key it
// takes effect at one instant between its call and its return).
func applyPurge(ctx context.Context, p purger, keys []string, c int, base time.Time) ([]porcupine.Operation, error) {
	t0 := time.Now()
	n, err := p.Purge(ctx)
	t1 := time.Now()
	if err != nil {
		return nil, err
	}
	ops := make([]porcupine.Operation, len(keys))
	for i, key := range keys {
		ops[i] = porcupine.Operation{
			ClientId: c,
			Input:    linInput{Op: opPurge, Key: key, NowLo: t0.UnixMilli() - clockSlack, Cleans: true},
			Call:     t0.Sub(base).Nanoseconds(),
			Output:   linOutput{Removed: n, NowHi: t1.UnixMilli() + clockSlack},
			Return:   t1.Sub(base).Nanoseconds(),
		}
	}
	return ops, nil
}

// formatKeyHistory renders the operations on key in call order, with their
// intervals in microseconds from the first call: the history porcupine
// found illegal, for a report.
func formatKeyHistory(ops []porcupine.Operation, key string) string {
	var sel []porcupine.Operation
	for _, op := range ops {
		if op.Input.(linInput).Key == key {
			sel = append(sel, op)
		}
	}
	sort.Slice(sel, func(i, j int) bool { return sel[i].Call < sel[j].Call })
	if len(sel) == 0 {
		return ""
	}
	t0 := sel[0].Call
	var b strings.Builder
	for _, op := range sel {
		fmt.Fprintf(&b, "  c%d [%7d, %7d]µs %s\n", op.ClientId, (op.Call-t0)/1000, (op.Return-t0)/1000,
			describe(op.Input.(linInput), op.Output.(linOutput)))
	}
	return b.String()
}
