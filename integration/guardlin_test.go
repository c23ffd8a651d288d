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
)

// gInput is one event of a Guard history. Key is the call's key, or the
// call's key and "/charge" for its step.
type gInput struct {
	Key    string
	Kind   int
	Client int
	OK     bool
	Value  string
}

// gState is the model's state of one key: the client whose run holds it
// (0: none), the recorded value ("" none), and the values of runs that
// ended after their context was cut off ("|v1|v2|"): the Guard records
// such a value if nobody took the claim over meanwhile, which the events
// do not show, so a Do may return it and a new run may start.
type gState struct {
	owner    int
	recorded string
	maybe    string
}

func gStep(s gState, in gInput) (bool, gState) {
	switch in.Kind {
	case evStart:
		if s.owner != 0 || s.recorded != "" {
			return false, s // a second run while one holds the key, or after the outcome
		}
		s.owner = in.Client
	case evCut:
		if s.owner == in.Client {
			s.owner = 0
		}
	case evEnd:
		switch {
		case s.owner == in.Client:
			s.owner = 0
			if in.OK {
				s.recorded = in.Value
			}
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
		return fmt.Sprintf("%s c%d %s ok=%v %q", in.Key, in.Client, [...]string{"start", "end", "cut", "do"}[in.Kind], in.OK, in.Value)
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

// guardHistory runs one random Guard history on s and returns its events.
func guardHistory(t testing.TB, s storekit.Store, seed uint64, prefix string) []porcupine.Operation {
	rnd := &lockedRand{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
	const (
		clients   = 4
		calls     = 6
		threshold = 400 * time.Millisecond
	)
	log := &gLog{began: time.Now()}
	keys := []string{prefix + "-a", prefix + "-b", prefix + "-c", prefix + "-d", prefix + "-e"}
	var wg sync.WaitGroup
	for c := 1; c <= clients; c++ {
		secrets := []idem.Option{idem.WithSecret(linSecretA, linSecretB)}
		if c%2 == 0 {
			secrets = []idem.Option{idem.WithSecret(linSecretB, linSecretA)}
		}
		g, err := idem.New[string](slowReplies{Store: s, rnd: rnd, p: 0.06, hold: threshold * 3 / 2},
			append(secrets, idem.WithTakeoverAfter(threshold), idem.WithHeartbeat(threshold/4), idem.OnDuplicate(idem.Wait))...)
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
	return log.ops
}

// guardRun is one run of fn in a Guard history: its step, then the end
// mode picks.
func guardRun(ctx context.Context, log *gLog, key string, c int, me string, mode int, threshold time.Duration) (string, error) {
	log.add(gInput{Key: key, Kind: evStart, Client: c})
	stop := context.AfterFunc(ctx, func() { log.add(gInput{Key: key, Kind: evCut, Client: c}) })
	defer stop()
	if _, err := idem.Step(ctx, "charge", func(sctx context.Context) (string, error) {
		sk := key + "/charge"
		log.add(gInput{Key: sk, Kind: evStart, Client: c})
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
