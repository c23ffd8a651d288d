package integration

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/anishathalye/porcupine"

	"github.com/idem-go/idem"
)

// Guard histories: at most once, as fn and its steps see it.
//
// TestGuardLinearizable runs random histories of Guards (not Store calls)
// against every store: clients configured with either order of two
// secrets (a rotation's second deploy), whose stores hold back some claim,
// get and heartbeat replies past the takeover threshold (a slow network:
// the request has been applied), call a few keys with an fn that runs a
// step, and whose first attempts fail after the step (a release), panic,
// or run past the threshold. Each fn and step run is logged as events:
// started, ended (with its value, or failed), and cut off (its context
// cancelled by the Guard). porcupine checks the events against a model of
// the promise: a run starts only when no run of the key is live and no
// outcome is recorded; a finished step never runs again; a Do that
// returns a value returns the recorded one.

var guardHistories = flag.Int("lin.guard", 3, "random Guard histories per store in TestGuardLinearizable")

// Guard history event kinds.
const (
	evStart = iota // a run began (fn, or the step)
	evEnd          // a run returned a value (ok) or an error
	evCut          // a run's context was cancelled: it no longer holds the key
	evDo           // a Do returned a value
	evLost         // the client's presence session is being killed (guardlost_test.go)
	evBack         // the client's presence session is back, a threshold ago
)

// gInput is one event of a Guard history. Key is the call's key, or the
// call's key and "/charge" for its step.
type gInput struct {
	Key    string
	Kind   int
	Client int
	OK     bool
	Value  string
	Token  int64 // a start's fencing token (idem.FencingToken)
}

// gState is the model's state of one key: the client whose run holds it
// (0: none), the recorded value ("" none), and the values of runs that
// ended after their context was cut off ("|v1|v2|"): the Guard records
// such a value if nobody took the claim over meanwhile, which the events
// do not show, so a Do may return it and a new run may start.
//
// A client's presence session killed while it lives (guardlost_test.go)
// adds three fields. dead holds the clients between their evLost and
// evBack (one bit each). lost says the owner's run held the key, or
// started, while its session was dead: its claim may then be taken over
// at once, and the taker's run may start before the Guard of the old
// owner cuts it off (the old owner learns of it at its next heartbeat).
// That overlap, and only that, is allowed, and its mirror: a dead
// session's claim taken over before its fn starts, so that the taker's
// run starts first (the fencing tokens tell which claim came first, token
// being the owner's). The taken-over client goes to fenced, and its run's
// value is never recorded (its completion bears the old nonce), not even
// as maybe. A lost run that ends with a value may also be taken over
// between its end and its completion: its value is a maybe, as a cut
// run's. A live session's run is never lost.
type gState struct {
	owner    int
	recorded string
	maybe    string
	dead     uint8
	lost     bool
	fenced   uint8
	token    int64
}

func gStep(s gState, in gInput) (bool, gState) {
	bit := uint8(1) << in.Client
	switch in.Kind {
	case evStart:
		if s.owner != 0 && s.dead&bit != 0 && in.Token < s.token && s.recorded == "" {
			// A claim of a dead session, taken over before its fn
			// started: the owner's claim is the later one.
			s.fenced |= bit
			return true, s
		}
		if (s.owner != 0 && !s.lost) || s.recorded != "" {
			return false, s // a second run while one holds the key, or after the outcome
		}
		if s.owner != 0 {
			s.fenced |= uint8(1) << s.owner // taken over from a lost session
		}
		s.owner, s.lost, s.token = in.Client, s.dead&bit != 0, in.Token
	case evLost:
		s.dead |= bit
		if s.owner == in.Client {
			s.lost = true
		}
	case evBack:
		s.dead &^= bit
	case evCut:
		if s.owner == in.Client {
			s.owner, s.lost = 0, false
		}
	case evEnd:
		switch {
		case s.owner == in.Client && in.OK && s.lost:
			// Its claim may be taken over before its completion, which
			// is then refused: recorded or not, as a cut run's value.
			s.owner, s.lost = 0, false
			if s.recorded == "" {
				s.maybe += "|" + in.Value + "|"
			}
		case s.owner == in.Client:
			s.owner = 0
			if in.OK {
				s.recorded = in.Value
			}
		case s.fenced&bit != 0:
			s.fenced &^= bit // its claim was taken over: its completion is refused
		case in.OK && s.recorded == "":
			s.maybe += "|" + in.Value + "|"
		}
	case evDo:
		switch {
		case s.recorded == in.Value:
		case s.recorded == "" && strings.Contains(s.maybe, "|"+in.Value+"|"):
			s.recorded = in.Value // the cut run's outcome was recorded after all
		default:
			return false, s
		}
	}
	return true, s
}

var guardModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		for _, op := range history {
			k := op.Input.(gInput).Key
			byKey[k] = append(byKey[k], op)
		}
		keys := make([]string, 0, len(byKey))
		for k := range byKey {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() any { return gState{} },
	Step: func(state, input, _ any) (bool, any) {
		return gStep(state.(gState), input.(gInput))
	},
	DescribeOperation: func(input, _ any) string {
		in := input.(gInput)
		return fmt.Sprintf("%s c%d %s ok=%v %q token %d", in.Key, in.Client, [...]string{"start", "end", "cut", "do", "lost", "back"}[in.Kind], in.OK, in.Value, in.Token)
	},
	DescribeState: func(state any) string {
		s := state.(gState)
		return fmt.Sprintf("owner c%d recorded %q", s.owner, s.recorded)
	},
}

// gLog records a Guard history's events.
type gLog struct {
	began time.Time
	mu    sync.Mutex
	ops   []porcupine.Operation
}

func (l *gLog) add(in gInput) {
	l.mu.Lock()
	defer l.mu.Unlock()
	at := time.Since(l.began).Nanoseconds()
	l.ops = append(l.ops, porcupine.Operation{ClientId: in.Client, Input: in, Call: at, Return: at})
}

// slowReplies holds back, at random, claim, get and heartbeat replies (the
// request applied) for hold, as a network that delays them.
type slowReplies struct {
	storekit.Store
	rnd  *lockedRand
	p    float64
	hold time.Duration
}

func (s slowReplies) late() {
	if s.rnd.Float64() < s.p {
		time.Sleep(s.hold)
	}
}

func (s slowReplies) Claim(ctx context.Context, r storekit.ClaimRequest) (storekit.ClaimResult, error) {
	res, err := s.Store.Claim(ctx, r)
	s.late()
	return res, err
}

func (s slowReplies) Get(ctx context.Context, key string) (*storekit.Record, error) {
	rec, err := s.Store.Get(ctx, key)
	s.late()
	return rec, err
}

func (s slowReplies) Heartbeat(ctx context.Context, key, nonce string, lease time.Duration) error {
	err := s.Store.Heartbeat(ctx, key, nonce, lease)
	s.late()
	return err
}

// slowPresence is slowReplies on a store with presence, passing the
// store's owner token on.
type slowPresence struct {
	storekit.Store
	p storekit.Presence
}

func (s slowPresence) Owner() string { return s.p.Owner() }

type lockedRand struct {
	mu sync.Mutex
	r  *rand.Rand
}

func (l *lockedRand) Float64() float64 { l.mu.Lock(); defer l.mu.Unlock(); return l.r.Float64() }
func (l *lockedRand) IntN(n int) int   { l.mu.Lock(); defer l.mu.Unlock(); return l.r.IntN(n) }

var (
	linSecretA = []byte("integration-guard-history-secret-a")
	linSecretB = []byte("integration-guard-history-secret-b")
	errAttempt = errors.New("integration: this attempt fails after its step")
)

// Guard history parameters.
const (
	gClients   = 4
	gThreshold = 400 * time.Millisecond
)

// guardHistory runs one random Guard history on s and returns its events.
func guardHistory(t testing.TB, s storekit.Store, seed uint64, prefix string) []porcupine.Operation {
	return guardHistoryOn(t, func(int) storekit.Store { return s }, seed, prefix, true, nil, nil)
}

// guardHistoryOn runs one random Guard history, client c on store(c),
// and returns its events. With rotate, clients 2 and 4 have the two
// secrets in the other order. Every Guard also gets opts; during, when not
// nil, starts with the history and is given its log and keys (those of
// the fn runs and of their steps); the func it returns is called once the
// clients are done, and must return once whatever it started has stopped.
func guardHistoryOn(t testing.TB, store func(c int) storekit.Store, seed uint64, prefix string, rotate bool,
	opts []idem.Option, during func(*gLog, []string) func()) []porcupine.Operation {
	rnd := &lockedRand{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	const (
		clients   = gClients
		calls     = 6
		threshold = gThreshold
	)
	log := &gLog{began: time.Now()}
	keys := []string{prefix + "-a", prefix + "-b", prefix + "-c", prefix + "-d", prefix + "-e"}
	var wg sync.WaitGroup
	stop := func() {}
	if during != nil {
		all := append([]string(nil), keys...)
		for _, k := range keys {
			all = append(all, k+"/charge")
		}
		stop = sync.OnceFunc(during(log, all))
		defer stop()
	}
	for c := 1; c <= clients; c++ {
		secrets := []idem.Option{idem.WithSecret(linSecretA, linSecretB)}
		if c%2 == 0 && rotate {
			secrets = []idem.Option{idem.WithSecret(linSecretB, linSecretA)}
		}
		var slow storekit.Store = slowReplies{Store: store(c), rnd: rnd, p: 0.06, hold: threshold * 3 / 2}
		if p, ok := store(c).(storekit.Presence); ok && opts != nil {
			slow = slowPresence{slow, p} // its claims name its owner (guardlost_test.go)
		}
		g, err := idem.New[string](slow,
			append(append(secrets, idem.WithTakeoverAfter(threshold), idem.WithHeartbeat(threshold/4), idem.OnDuplicate(idem.Wait)), opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		wg.Go(func() {
			for i := range calls {
				key := keys[rnd.IntN(len(keys))]
				mode := rnd.IntN(6) // 0: fail after the step, 1: panic after it, 2: run past the threshold, else quick
				me := fmt.Sprintf("c%d-%d", c, i)
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				v, err := func() (v string, err error) {
					defer func() {
						if p := recover(); p != nil {
							err = fmt.Errorf("panicked: %v", p)
						}
					}()
					return g.Do(ctx, key, func(ctx context.Context) (string, error) {
						return guardRun(ctx, log, key, c, me, mode, threshold)
					})
				}()
				cancel()
				if err == nil {
					log.add(gInput{Key: key, Kind: evDo, Client: c, Value: v})
				}
			}
		})
	}
	wg.Wait()
	stop()
	log.mu.Lock()
	defer log.mu.Unlock()
	return log.ops
}

// guardRun is one run of fn in a Guard history: its step, then the end
// mode picks.
func guardRun(ctx context.Context, log *gLog, key string, c int, me string, mode int, threshold time.Duration) (string, error) {
	tok, _ := idem.FencingToken(ctx)
	log.add(gInput{Key: key, Kind: evStart, Client: c, Token: tok})
	stop := context.AfterFunc(ctx, func() { log.add(gInput{Key: key, Kind: evCut, Client: c}) })
	defer stop()
	if _, err := idem.Step(ctx, "charge", func(sctx context.Context) (string, error) {
		sk := key + "/charge"
		stok, _ := idem.FencingToken(sctx)
		log.add(gInput{Key: sk, Kind: evStart, Client: c, Token: stok})
		sstop := context.AfterFunc(sctx, func() { log.add(gInput{Key: sk, Kind: evCut, Client: c}) })
		defer sstop()
		time.Sleep(time.Duration(rand.IntN(20)) * time.Millisecond)
		log.add(gInput{Key: sk, Kind: evEnd, Client: c, OK: true, Value: me})
		return me, nil
	}); err != nil {
		log.add(gInput{Key: key, Kind: evEnd, Client: c})
		return "", err
	}
	switch mode {
	case 0:
		log.add(gInput{Key: key, Kind: evEnd, Client: c})
		return "", errAttempt
	case 1:
		log.add(gInput{Key: key, Kind: evEnd, Client: c})
		panic("integration: fn panics after its step")
	case 2:
		time.Sleep(threshold * 3 / 2) // heartbeats keep it
	}
	log.add(gInput{Key: key, Kind: evEnd, Client: c, OK: true, Value: me})
	return me, nil
}

// TestGuardLinearizable checks random Guard histories (see above) on
// every store with porcupine.
func TestGuardLinearizable(t *testing.T) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			s := b.open(t)
			seed := firstSeed()
			var illegal, events int
			for i := range *guardHistories {
				ops := guardHistory(t, s, seed+uint64(i), fmt.Sprint("glin-", seed+uint64(i)))
				events += len(ops)
				if porcupine.CheckOperationsTimeout(guardModel, ops, checkTimeout) == porcupine.Illegal {
					illegal++
					t.Logf("%s: Guard history (seed %d) breaks at most once:\n%s", b.name, seed+uint64(i), describeGuardIllegal(ops))
				}
			}
			t.Logf("%s: %d Guard histories (%d events, seeds %d..): %d illegal", b.name, *guardHistories, events, seed, illegal)
			if illegal > 0 {
				t.Errorf("%s: %d of %d Guard histories break at most once", b.name, illegal, *guardHistories)
			}
		})
	}
	for _, lb := range lostBackends { // guardlost_test.go
		t.Run(lb.name+"-lost-sessions", func(t *testing.T) {
			t.Parallel()
			if illegal := lostGuardRuns(t, lb, func(s storekit.Store) storekit.Store { return s }); illegal > 0 {
				t.Errorf("%s: %d of %d Guard histories with killed presence sessions break at most once", lb.name, illegal, *lostHistories)
			}
		})
	}
}

// describeGuardIllegal lists the events of each key whose events the model
// refuses, in time order.
func describeGuardIllegal(ops []porcupine.Operation) string {
	var out string
	for _, part := range guardModel.Partition(ops) {
		if porcupine.CheckOperationsTimeout(guardModel, part, checkTimeout) != porcupine.Illegal {
			continue
		}
		sort.SliceStable(part, func(i, j int) bool { return part[i].Call < part[j].Call })
		for _, op := range part {
			out += fmt.Sprintf("  %8.3fms %s\n", float64(op.Call)/1e6, guardModel.DescribeOperation(op.Input, nil))
		}
	}
	return out
}
