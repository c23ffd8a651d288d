// Package torture is the redelivery torture test every broker wrapper of
// idemmsg runs: messages published to a real broker, consumer processes
// that are SIGKILLed in the middle of a handler, acks dropped on purpose,
// redelivery timeouts shorter than some handlers. It counts how often each
// message's side effect happened.
package torture

import (
	"bufio"
	"context"
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemmsg"
	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/stores/filestore"
)

// Message is one published message.
type Message struct {
	Key  string
	Body []byte
}

// Env is what a consumer process gets.
type Env struct {
	// Dedup guards the handler; nil in an unguarded run.
	Dedup *idemmsg.Dedup
	// Effect is the handler's side effect: it sleeps as long as the message
	// says (some messages longer than the redelivery timeout), and appends
	// the key to the effects log. Call it once per handler run.
	Effect func(ctx context.Context, key string) error
	// DropAck reports whether to skip the ack of a message's first
	// delivery (a consumer that loses its ack).
	DropAck func() bool
	// Decided logs the Dedup's decision for a delivery of key; a run that
	// does not settle shows the last ones of each missing message.
	Decided func(key string, r idemmsg.Result)
}

// Config is one torture run.
type Config struct {
	Messages  int           // default 500
	Consumers int           // consumer processes at once, default 3
	KillEvery time.Duration // default 2s: a consumer is killed in a slow handler this often
	Deadline  time.Duration // default 3 minutes
	DropAcks  float64       // fraction of first deliveries whose ack is skipped, default 0.1
	Slow      float64       // fraction of messages whose handler outlasts the redelivery timeout, default 0.1
	SlowFor   time.Duration // how long a slow handler sleeps, default 1.5s
	Guarded   bool
	// Setup runs in the test process: create the broker's stream or
	// queue named ns and publish msgs.
	Setup func(t *testing.T, ns string, msgs []Message)
	// Consume runs in each consumer process until the process is killed.
	Consume func(ctx context.Context, ns string, env Env) error
	// Pending, in the test process, says how many messages are not
	// acknowledged yet (delivered and unacked, or waiting).
	Pending func(t *testing.T, ns string) int
}

// Report is what a run counted.
type Report struct {
	Effects    int // side effects in all
	Duplicates int // side effects beyond one per message
	Missing    int // messages whose side effect never happened
	Kills      int // consumers SIGKILLed in a handler
	Exits      int // consumers that exited on their own (and were replaced)
	Pending    int // messages left unacknowledged at the end
	Guarded    bool
}

// Check fails t unless the run proved its point: guarded, every side
// effect exactly once, nothing left unacknowledged, and consumers killed on
// the way; unguarded, side effects repeated.
func (rep Report) Check(t *testing.T) {
	t.Helper()
	if !rep.Guarded {
		if rep.Duplicates <= 0 {
			t.Fatal("the torture should repeat side effects without idemmsg")
		}
		return
	}
	if rep.Duplicates != 0 {
		t.Fatalf("side effects repeated: %d", rep.Duplicates)
	}
	if rep.Missing != 0 {
		t.Fatalf("side effects missing: %d", rep.Missing)
	}
	if rep.Pending != 0 {
		t.Fatalf("messages left unacknowledged: %d", rep.Pending)
	}
	if rep.Kills <= 0 {
		t.Fatal("no consumer was killed in a handler")
	}
}

const (
	childEnv = "IDEM_TORTURE_CHILD"
	testEnv  = "IDEM_TORTURE_TEST"
	nsEnv    = "IDEM_TORTURE_NS"
	dirEnv   = "IDEM_TORTURE_DIR"
	slowEnv  = "IDEM_TORTURE_SLOW"
	dropEnv  = "IDEM_TORTURE_DROP"
	guardEnv = "IDEM_TORTURE_GUARDED"
	slowFor  = "IDEM_TORTURE_SLOW_FOR"
)

// GuardOptions are the Guard options of every consumer: a SIGKILLed
// consumer's claim goes stale after two seconds. A live consumer whose
// heartbeats a loaded machine delays is cut off (its handler's context
// cancelled) before that, and the side effect checks the context last.
var GuardOptions = []idem.Option{idem.WithTakeoverAfter(2 * time.Second), idem.WithHeartbeat(400 * time.Millisecond)}

// Run runs the torture test. Call it from a test function of its own: the
// test binary is re-executed as the consumer processes, which run that
// test again and call cfg.Consume.
func Run(t *testing.T, cfg Config) Report {
	t.Helper()
	if os.Getenv(childEnv) == "1" && os.Getenv(testEnv) == t.Name() {
		os.Exit(child(cfg))
	}
	defaults(&cfg)
	ns := fmt.Sprintf("torture_%x", rand.Uint64())
	dir := t.TempDir()
	msgs := make([]Message, cfg.Messages)
	for i := range msgs {
		msgs[i] = Message{Key: fmt.Sprintf("%s-m%04d", ns, i), Body: []byte(fmt.Sprintf(`{"n":%d}`, i))}
	}
	if err := os.WriteFile(dir+"/effects.log", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cfg.Setup(t, ns, msgs)
	r := &run{t: t, cfg: cfg, ns: ns, dir: dir, starts: make(chan startLine, 64), exits: make(chan exitLine, 64)}
	rep := r.loop(msgs)
	rep.Guarded = cfg.Guarded
	t.Logf("guarded=%v: %d messages, %d consumers killed in a handler, %d exited on their own, %d side effects (%d duplicates, %d missing), %d left unacknowledged",
		cfg.Guarded, cfg.Messages, rep.Kills, rep.Exits, rep.Effects, rep.Duplicates, rep.Missing, rep.Pending)
	return rep
}

func defaults(cfg *Config) {
	if cfg.Messages <= 0 {
		cfg.Messages = 500
	}
	if cfg.Consumers <= 0 {
		cfg.Consumers = 3
	}
	if cfg.KillEvery <= 0 {
		cfg.KillEvery = 2 * time.Second
	}
	if cfg.Deadline <= 0 {
		cfg.Deadline = 3 * time.Minute
	}
	if cfg.DropAcks == 0 {
		cfg.DropAcks = 0.1
	}
	if cfg.Slow == 0 {
		cfg.Slow = 0.1
	}
	if cfg.SlowFor <= 0 {
		cfg.SlowFor = 1500 * time.Millisecond
	}
}

// startLine is a consumer's notice that it started a slow handler.
type startLine struct {
	proc *exec.Cmd
	key  string
}

// maxKillsPerKey bounds the kills inside one message's handler: a slow
// message left for last would otherwise be killed on every attempt (one
// kill every KillEvery, one takeover as often) and never finish.
const maxKillsPerKey = 3

type run struct {
	t      *testing.T
	cfg    Config
	ns     string
	dir    string
	starts chan startLine
	exits  chan exitLine

	mu    sync.Mutex
	procs []*exec.Cmd // running consumers, oldest first
	ended bool        // killAll ran: exits are no longer told
}

// exitLine is the notice of a consumer that exited without being killed
// (its Consume returned an error, or it crashed).
type exitLine struct {
	pid int
	err error
}

func (r *run) start() {
	parts := strings.Split(r.t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	cmd := exec.Command(os.Args[0], "-test.run="+strings.Join(parts, "/"), "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=1", testEnv+"="+r.t.Name(), nsEnv+"="+r.ns, dirEnv+"="+r.dir,
		slowEnv+"="+strconv.FormatFloat(r.cfg.Slow, 'f', -1, 64), dropEnv+"="+strconv.FormatFloat(r.cfg.DropAcks, 'f', -1, 64),
		guardEnv+"="+strconv.FormatBool(r.cfg.Guarded), slowFor+"="+r.cfg.SlowFor.String())
	out, err := cmd.StdoutPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if key, ok := strings.CutPrefix(sc.Text(), "SLOW "); ok {
				select {
				case r.starts <- startLine{proc: cmd, key: key}:
				default:
				}
			}
		}
		err := cmd.Wait()
		if r.forget(cmd) {
			select {
			case r.exits <- exitLine{pid: cmd.Process.Pid, err: err}:
			default:
			}
		}
	}()
	r.mu.Lock()
	r.procs = append(r.procs, cmd)
	r.mu.Unlock()
}

func (r *run) kill(cmd *exec.Cmd) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, p := range r.procs {
		if p == cmd {
			_ = p.Process.Signal(syscall.SIGKILL)
			r.procs = append(r.procs[:i], r.procs[i+1:]...)
			return true
		}
	}
	return false
}

// forget removes cmd, which exited, from the running consumers; it reports
// whether cmd exited on its own (it was neither killed nor the run over).
func (r *run) forget(cmd *exec.Cmd) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, p := range r.procs {
		if p == cmd {
			r.procs = append(r.procs[:i], r.procs[i+1:]...)
			return !r.ended
		}
	}
	return false
}

// alive is how many consumers run.
func (r *run) alive() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.procs)
}

func (r *run) killAll() {
	r.mu.Lock()
	procs := r.procs
	r.procs = nil
	r.mu.Unlock()
	for _, p := range procs {
		_ = p.Process.Signal(syscall.SIGKILL)
	}
}

// loop keeps cfg.Consumers consumers running, kills one in the middle of a
// slow handler every KillEvery, and ends once every message's side effect
// happened and nothing is left unacknowledged, even with every consumer
// gone. A consumer that exits on its own is logged and replaced, so that
// the consumers never dwindle to none while messages wait.
func (r *run) loop(msgs []Message) Report {
	defer func() {
		r.mu.Lock()
		r.ended = true
		r.mu.Unlock()
		r.killAll()
	}()
	var rep Report
	for range r.cfg.Consumers {
		r.start()
	}
	deadline := time.Now().Add(r.cfg.Deadline)
	nextKill := time.Now().Add(r.cfg.KillEvery)
	kills := map[string]int{}
	for time.Now().Before(deadline) {
		select {
		case s := <-r.starts:
			if time.Now().After(nextKill) && kills[s.key] < maxKillsPerKey {
				time.Sleep(r.cfg.SlowFor / 10) // inside the handler's sleep, before its side effect
				if r.kill(s.proc) {
					rep.Kills++
					kills[s.key]++
					r.start()
				}
				nextKill = time.Now().Add(r.cfg.KillEvery)
			}
		case e := <-r.exits:
			rep.Exits++
			r.t.Logf("consumer pid %d exited on its own (%v): starting another", e.pid, e.err)
			r.start()
		case <-time.After(250 * time.Millisecond):
		}
		counts := r.effects()
		if len(counts) < len(msgs) {
			continue
		}
		if !r.cfg.Guarded {
			// Without the Dedup the count is what matters: every message
			// ran at least once, and some more than once.
			rep = r.report(msgs, rep)
			rep.Pending = r.cfg.Pending(r.t, r.ns)
			return rep
		}
		if r.cfg.Pending(r.t, r.ns) > 0 {
			continue
		}
		// Every side effect happened and nothing waits: with the consumers
		// gone, whatever they held unacknowledged would come back.
		r.killAll()
		time.Sleep(500 * time.Millisecond)
		if p := r.cfg.Pending(r.t, r.ns); p > 0 {
			for range r.cfg.Consumers {
				r.start()
			}
			continue
		}
		return r.report(msgs, rep)
	}
	rep = r.report(msgs, rep)
	rep.Pending = r.cfg.Pending(r.t, r.ns)
	r.t.Errorf("torture run did not settle in %v: %d side effects missing, %d messages waiting, %d consumers running, %d killed, %d exited on their own",
		r.cfg.Deadline, rep.Missing, rep.Pending, r.alive(), rep.Kills, rep.Exits)
	r.explain(msgs)
	return rep
}

// explain logs, for every message whose side effect is missing, its record
// in the consumers' store, and the last decisions of the run: a run that did
// not settle says where it stuck. A message that waits although its side
// effect happened shows in the last decisions (its redelivery and what the
// Dedup told it).
func (r *run) explain(msgs []Message) {
	if !r.cfg.Guarded {
		return
	}
	if decisions, err := os.ReadFile(r.dir + "/decisions.log"); err == nil {
		lines := strings.Split(strings.TrimSpace(string(decisions)), "\n")
		r.t.Logf("the last decisions of %d:\n\t%s", len(lines), strings.Join(lines[max(0, len(lines)-20):], "\n\t"))
	}
	store, err := filestore.New(r.dir + "/store")
	if err != nil {
		r.t.Logf("explain: %v", err)
		return
	}
	g, err := idem.New[[]byte](store, GuardOptions...)
	if err != nil {
		r.t.Logf("explain: %v", err)
		return
	}
	counts := r.effects()
	decisions, _ := os.ReadFile(r.dir + "/decisions.log")
	for _, m := range msgs {
		if counts[m.Key] > 0 {
			continue
		}
		var last []string
		for _, line := range strings.Split(string(decisions), "\n") {
			if strings.Contains(line, " "+m.Key+" ") {
				last = append(last, line)
			}
		}
		r.t.Logf("missing %s: %d decisions, the last: %s", m.Key, len(last), strings.Join(last[max(0, len(last)-8):], "\n\t"))
		sk, err := guardinfo.StorageKey(g, m.Key)
		if err != nil {
			r.t.Logf("missing %s: %v", m.Key, err)
			continue
		}
		rec, err := store.Get(context.Background(), sk)
		if err != nil {
			r.t.Logf("missing %s: record: %v", m.Key, err)
			continue
		}
		now := time.Now().UnixMilli()
		ms := func(d int64) time.Duration { return time.Duration(d) * time.Millisecond }
		r.t.Logf("missing %s: record %s, attempt %d, started %v ago, heartbeat %v ago, expires in %v, error %+v",
			m.Key, rec.Status, rec.Attempt, ms(now-rec.StartedAt), ms(now-rec.HeartbeatAt), ms(rec.ExpiresAt-now), rec.Error)
	}
}

func (r *run) effects() map[string]int {
	b, err := os.ReadFile(r.dir + "/effects.log")
	if err != nil {
		r.t.Fatal(err)
	}
	counts := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line != "" {
			counts[line]++
		}
	}
	return counts
}

func (r *run) report(msgs []Message, rep Report) Report {
	counts := r.effects()
	for _, m := range msgs {
		n := counts[m.Key]
		rep.Effects += n
		if n == 0 {
			rep.Missing++
		} else {
			rep.Duplicates += n - 1
		}
	}
	return rep
}

// child is a consumer process.
func child(cfg Config) int {
	dir, ns := os.Getenv(dirEnv), os.Getenv(nsEnv)
	slow, _ := strconv.ParseFloat(os.Getenv(slowEnv), 64)
	drop, _ := strconv.ParseFloat(os.Getenv(dropEnv), 64)
	sleep, _ := time.ParseDuration(os.Getenv(slowFor))
	env := Env{DropAck: func() bool { return rand.Float64() < drop }}
	if os.Getenv(guardEnv) == "true" {
		store, err := filestore.New(dir + "/store")
		if err != nil {
			fmt.Fprintln(os.Stderr, "store:", err)
			return 2
		}
		env.Dedup, err = idemmsg.New(store, idemmsg.WithGuard(GuardOptions...), idemmsg.WithBusyDelay(200*time.Millisecond))
		if err != nil {
			fmt.Fprintln(os.Stderr, "dedup:", err)
			return 2
		}
	}
	log, err := os.OpenFile(dir+"/effects.log", os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, "effects log:", err)
		return 2
	}
	decisions, err := os.OpenFile(dir+"/decisions.log", os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "decisions log:", err)
		return 2
	}
	pid := os.Getpid()
	env.Decided = func(key string, r idemmsg.Result) {
		line := fmt.Sprintf("%s %s pid=%d action=%v ran=%v replayed=%v delay=%v err=%v", time.Now().Format("15:04:05.000"), key, pid, r.Action, r.Ran, r.Replayed, r.Delay, r.Err)
		_, _ = decisions.Write([]byte(strings.ReplaceAll(line, "\n", " ") + "\n"))
	}
	var outMu sync.Mutex
	env.Effect = func(ctx context.Context, key string) error {
		d := 5 * time.Millisecond
		if h := sha256.Sum256([]byte(key)); float64(h[0])/256 < slow {
			d = sleep
			outMu.Lock()
			fmt.Println("SLOW " + key)
			outMu.Unlock()
		}
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return context.Cause(ctx)
		}
		if err := ctx.Err(); err != nil {
			return context.Cause(ctx) // claim lost or lapsed: another consumer may run it
		}
		_, err := log.Write([]byte(key + "\n")) // one write: O_APPEND keeps lines whole
		return err
	}
	if err := cfg.Consume(context.Background(), ns, env); err != nil {
		fmt.Fprintln(os.Stderr, "consume:", err)
		return 2
	}
	return 0
}
