//go:build unix

package storetest

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

// StepCrashConfig configures the StepCrash suite of the Harness.
type StepCrashConfig struct {
	// NewStore opens the store under test. It is called once in the test
	// process, before any child starts (prepare the backend there), and
	// once in every child, with the same namespace.
	NewStore func(namespace string) (storekit.Store, error)
	// Namespace is handed to NewStore in every process: a key prefix, a
	// table name, a directory. Default: a fresh random string.
	Namespace string
	// TakeoverAfter is the owner's takeover threshold (default 1s; the
	// heartbeat is a quarter of it). A killed owner's claims are taken
	// over once it has passed. The taking Guards use a long one of their
	// own. When the owner's claim lapses before it reaches its crash point
	// (a store too slow to refresh it in time), the case starts over with
	// twice the threshold.
	TakeoverAfter time.Duration
	// Options are extra Guard options.
	Options []idem.Option
	// Env is extra environment for the children.
	Env []string
}

const (
	stepRoleEnv = "IDEM_STORETEST_STEP_ROLE" // owner-<case>, taker-<case>, verify-<case>
	stepKeyEnv  = "IDEM_STORETEST_STEP_KEY"
	stepFailEnv = "IDEM_STORETEST_STEP_FAIL" // the taker's fn fails after step 3
	stepTOEnv   = "IDEM_STORETEST_STEP_TAKEOVER"
)

// runStepCrash proves what steps promise when the process running a call
// dies or stops in the middle of it, with real OS processes on the store.
// It re-executes the test binary (as runProcesses does) to run a guarded fn
// of three steps that log every run of a step (step, StepKey, fencing
// token, process) to a shared file, and checks three cases:
//
//   - after1: the owner process is SIGKILLed after step 1 returned; a
//     second process takes the call over: step 1 runs zero more times,
//     steps 2 and 3 once.
//   - in2: the owner is SIGKILLed inside step 2: the takeover runs step 1
//     zero more times, step 2 once more with the same StepKey and a
//     higher fencing token, step 3 once.
//   - stop2: the owner is SIGSTOPped inside step 2; a second process
//     takes over, runs steps 2 and 3 and fails (so the call is released);
//     the owner is resumed (SIGCONT) and its step must not be recorded
//     over the new attempt's: a third process replays every step, with
//     step 2's value from the second process.
//
// The children re-run the test binary with -test.run naming t, and do the
// work where they reach t (then exit the process). It takes a few takeover
// thresholds per case. It is for Unix (signals); on other systems it
// skips.
func runStepCrash(t *testing.T, cfg StepCrashConfig) {
	t.Helper()
	if cfg.TakeoverAfter <= 0 {
		cfg.TakeoverAfter = time.Second
	}
	if os.Getenv(stepRoleEnv) != "" && os.Getenv(procTestEnv) == t.Name() {
		os.Exit(stepChild(cfg))
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "steps" + strconv.FormatUint(rand.Uint64(), 36)
	}
	if _, err := cfg.NewStore(cfg.Namespace); err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	for _, c := range []string{"after1", "in2", "stop2"} {
		t.Run(c, func(t *testing.T) { stepCrashCase(t, cfg, c) })
	}
}

// stepProcs starts the children of one case.
type stepProcs struct {
	t    *testing.T
	cfg  StepCrashConfig
	run  string // the -test.run pattern of the parent test
	log  string
	key  string
	outs []*bytes.Buffer
}

func (p *stepProcs) start(role string, fail bool) (*exec.Cmd, *bytes.Buffer) {
	p.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run="+p.run, "-test.count=1")
	env := append(append(os.Environ(), p.cfg.Env...),
		stepRoleEnv+"="+role, procTestEnv+"="+parentName(p.t), procNSEnv+"="+p.cfg.Namespace,
		procLogEnv+"="+p.log, stepKeyEnv+"="+p.key, stepTOEnv+"="+p.cfg.TakeoverAfter.String())
	if fail {
		env = append(env, stepFailEnv+"=1")
	}
	cmd.Env = env
	out := &bytes.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	p.outs = append(p.outs, out)
	return cmd, out
}

// parentName is the name of the test that called runStepCrash.
func parentName(t *testing.T) string {
	name := t.Name()
	return name[:strings.LastIndex(name, "/")]
}

// waitLog waits until the shared log has a line starting with prefix; it
// returns false if the owner exited first (ownerDone closed).
func (p *stepProcs) waitLog(prefix string, ownerDone <-chan struct{}) bool {
	p.t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		raw, _ := os.ReadFile(p.log)
		for _, line := range strings.Split(string(raw), "\n") {
			if strings.HasPrefix(line, prefix) {
				return true
			}
		}
		select {
		case <-ownerDone:
			return false
		case <-time.After(10 * time.Millisecond):
		}
	}
	p.t.Fatalf("the owner never logged %q in 2 minutes", prefix)
	return false
}

func (p *stepProcs) runs() []stepRun {
	raw, err := os.ReadFile(p.log)
	if err != nil {
		p.t.Fatal(err)
	}
	var runs []stepRun
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Fields(line)
		if len(f) != 5 || f[0] != "run" {
			continue
		}
		tok, _ := strconv.ParseInt(f[3], 10, 64)
		runs = append(runs, stepRun{step: f[1], key: f[2], token: tok, who: f[4]})
	}
	return runs
}

// result returns what a child printed as its call's outcome.
func result(out *bytes.Buffer) string {
	for _, line := range strings.Split(out.String(), "\n") {
		if v, ok := strings.CutPrefix(line, "RESULT "); ok {
			return v
		}
	}
	return "(no result) " + out.String()
}

// stepCrashCase runs case c, starting over with twice the owner's takeover
// threshold when the owner's call ended before it reached its crash point
// (a store too slow for the owner to refresh its claim in time).
func stepCrashCase(t *testing.T, cfg StepCrashConfig, c string) {
	th := cfg.TakeoverAfter
	for range stepOwnerTries {
		cfg.TakeoverAfter = th
		if stepCrashTry(t, cfg, c) {
			return
		}
		th *= 2
	}
	t.Fatalf("the owner's call ended before its crash point %d times, up to a takeover threshold of %v", stepOwnerTries, th/2)
}

// stepCrashTry runs case c once; it returns false when the owner's call
// ended before it reached its crash point.
func stepCrashTry(t *testing.T, cfg StepCrashConfig, c string) bool {
	parts := strings.Split(parentName(t), "/")
	for i, s := range parts {
		parts[i] = "^" + regexp.QuoteMeta(s) + "$"
	}
	p := &stepProcs{t: t, cfg: cfg, run: strings.Join(parts, "/"), log: t.TempDir() + "/steps.log",
		key: "stepcrash-" + c + "-" + strconv.FormatUint(rand.Uint64(), 36)}
	if err := os.WriteFile(p.log, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	owner, ownerOut := p.start("owner-"+c, false)
	ownerDone := make(chan struct{})
	var ownerErr error
	go func() { ownerErr = owner.Wait(); close(ownerDone) }()
	waitFor := map[string]string{"after1": "after1", "in2": "run step2", "stop2": "run step2"}[c]
	if !p.waitLog(waitFor, ownerDone) {
		if got := result(ownerOut); ownerErr == nil && strings.HasPrefix(got, "ERROR") {
			t.Logf("the owner's call ended before %s (takeover threshold %v): %s; starting over with twice the threshold", waitFor, cfg.TakeoverAfter, got)
			return false
		}
		t.Fatalf("the owner exited (%v) before it logged %q; its output:\n%s", ownerErr, waitFor, ownerOut)
	}
	if c == "stop2" {
		if err := owner.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	} else {
		if err := owner.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-ownerDone
	}
	taker, takerOut := p.start("taker-"+c, c == "stop2")
	if err := taker.Wait(); err != nil {
		t.Fatalf("taker: %v\n%s", err, takerOut)
	}
	if c != "stop2" {
		if got, want := result(takerOut), "s1=owner s2=taker s3=taker"; got != want {
			t.Errorf("the takeover's result: %q, want %q", got, want)
		}
		checkStepRuns(t, p.runs(), c == "in2")
		return true
	}
	if got := result(takerOut); !strings.HasPrefix(got, "ERROR") {
		t.Errorf("the taker's fn was to fail; it returned %q", got)
	}
	// Resume the stopped owner: its step 2 returns, and its writes must be
	// refused. Let it finish before the third attempt looks.
	if err := owner.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	<-ownerDone
	if ownerErr != nil {
		t.Fatalf("resumed owner: %v\n%s", ownerErr, ownerOut)
	}
	if got := result(ownerOut); !strings.HasPrefix(got, "ERROR") {
		t.Errorf("the resumed owner's call returned %q after it was taken over; want an error", got)
	}
	verify, verifyOut := p.start("verify-"+c, false)
	if err := verify.Wait(); err != nil {
		t.Fatalf("verify: %v\n%s", err, verifyOut)
	}
	if got, want := result(verifyOut), "s1=owner s2=taker s3=taker"; got != want {
		t.Errorf("the third attempt's result: %q, want %q (step 2 as the takeover recorded it)", got, want)
	}
	checkStepRuns(t, p.runs(), true)
	return true
}

// stepChild is the work of one child of runStepCrash: it runs the call
// once and prints its outcome.
func stepChild(cfg StepCrashConfig) int {
	role, _, _ := strings.Cut(os.Getenv(stepRoleEnv), "-")
	c := os.Getenv(stepRoleEnv)[len(role)+1:]
	to, err := time.ParseDuration(os.Getenv(stepTOEnv))
	if err != nil {
		fmt.Println("bad takeover:", err)
		return 2
	}
	logFile, err := os.OpenFile(os.Getenv(procLogEnv), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		fmt.Println(err)
		return 2
	}
	defer logFile.Close()
	store, err := cfg.NewStore(os.Getenv(procNSEnv))
	if err != nil {
		fmt.Println("NewStore:", err)
		return 2
	}
	if role != "owner" {
		// Only the owner is taken over, by its own (stored) threshold; a
		// short one elsewhere would only let a slow store lapse the
		// taker's claim and cancel its fn.
		to = stepLong
	}
	opts := append([]idem.Option{idem.WithTakeoverAfter(to), idem.WithHeartbeat(to / 4), idem.OnDuplicate(idem.Wait)}, cfg.Options...)
	g, err := idem.New[string](store, opts...)
	if err != nil {
		fmt.Println("idem.New:", err)
		return 2
	}
	// One write(2) per line: O_APPEND keeps lines whole.
	logRun := func(r stepRun) { fmt.Fprintf(logFile, "run %s %s %d %s\n", r.step, r.key, r.token, r.who) }
	at := func(ctx context.Context, point string) error {
		if role != "owner" {
			return nil
		}
		switch {
		case point == "after1":
			fmt.Fprintf(logFile, "after1\n")
			if c == "after1" {
				time.Sleep(time.Hour) // killed here
			}
		case point == "in2" && c == "stop2":
			// Stopped here; once resumed, the step's own claim has been
			// taken over: wait until its heartbeat notices (the step's
			// context ends), then return. (The minute is a safety net
			// only: a slow parent may take long to send SIGSTOP, and the
			// step must still be in flight when it does.)
			select {
			case <-ctx.Done():
			case <-time.After(time.Minute):
			}
		case point == "in2":
			time.Sleep(time.Hour) // killed here
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	v, err := g.Do(ctx, os.Getenv(stepKeyEnv), threeSteps(role, logRun, at, os.Getenv(stepFailEnv) != ""))
	if err != nil {
		fmt.Printf("RESULT ERROR %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
	} else {
		fmt.Printf("RESULT %s\n", v)
	}
	return 0
}
