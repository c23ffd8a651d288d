package storetest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

// ProcessConfig configures a process suite of the Harness (Processes,
// RotationProcesses, RotationOrders).
type ProcessConfig struct {
	// NewStore opens the store under test. It is called once in the test
	// process, before the children start (prepare the backend there: a
	// table, a schema), and once in every child, with the same namespace.
	NewStore func(namespace string) (storekit.Store, error)
	// Namespace is handed to NewStore in every process: a key prefix, a
	// table name, a directory. Default: a fresh random string.
	Namespace string
	// Processes, Goroutines and Keys size the run: every goroutine of every
	// process calls Do on every key, in its own random order, each
	// goroutine with its own Guard (so all of them go to the store).
	// Defaults 4, 16 and 12.
	Processes, Goroutines, Keys int
	// Options are extra Guard options; OnDuplicate(Wait) is set unless
	// Duplicate says otherwise.
	Options []idem.Option
	// Duplicate, if set, is the duplicate policy of every Guard instead of
	// Wait. Under Return and Raise a caller may be told the call is in
	// progress; every caller that gets a result must get the run's.
	Duplicate *idem.DuplicatePolicy
	// Steps makes every call run Step "charge" first, and its first
	// attempt (fencing token 1) fail after it, so the call is released and
	// retried by another caller: the charge must run once per key, and the
	// call succeed once.
	Steps bool
	// Env is extra environment for the children.
	Env []string
}

const (
	procEnv     = "IDEM_STORETEST_PROCESS" // child number
	procTestEnv = "IDEM_STORETEST_TEST"    // the test the child runs
	procNSEnv   = "IDEM_STORETEST_NAMESPACE"
	procLogEnv  = "IDEM_STORETEST_EXEC_LOG"
	procKeysEnv = "IDEM_STORETEST_KEYS"
	procGoEnv   = "IDEM_STORETEST_GOROUTINES"
	procAtEnv   = "IDEM_STORETEST_START_AT"
)

// runProcesses proves at-most-once execution across OS processes. It
// re-executes the test binary as cfg.Processes children that each run
// cfg.Goroutines Guards over the same cfg.Keys keys; the guarded function
// appends a line to a shared log. It then checks that every key ran exactly
// once and that every caller in every process got that run's result.
//
// The children re-run the test binary with -test.run naming t, and do the
// work where they reach t (then exit the process); another test the
// pattern also matches skips.
func runProcesses(t *testing.T, cfg ProcessConfig) {
	t.Helper()
	if cfg.Processes <= 0 {
		cfg.Processes = 4
	}
	if cfg.Goroutines <= 0 {
		cfg.Goroutines = 16
	}
	if cfg.Keys <= 0 {
		cfg.Keys = 12
	}
	if os.Getenv(procEnv) != "" {
		if os.Getenv(procTestEnv) == t.Name() {
			os.Exit(processChild(cfg))
		}
		// A child runs the one test it was started for: another test its
		// -test.run pattern also matches (a sibling subtest under the
		// same parent) must not start children of its own.
		t.Skip("a child process of " + os.Getenv(procTestEnv))
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "proc" + strconv.FormatUint(rand.Uint64(), 36)
	}
	if _, err := cfg.NewStore(cfg.Namespace); err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	execLog := t.TempDir() + "/exec.log"
	if err := os.WriteFile(execLog, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	outs := runChildren(t, cfg, execLog)
	executor := readExecLog(t, execLog, cfg.Keys, cfg.Duplicate == nil)
	checkResults(t, cfg, executor, outs)
	if !t.Failed() {
		t.Logf("%d keys x %d processes x %d goroutines: each key ran once and all %d callers got its result",
			cfg.Keys, cfg.Processes, cfg.Goroutines, cfg.Processes*cfg.Goroutines)
	}
}

// runChildren re-executes the test binary as cfg.Processes children of
// the running test, which start their calls together about 1.5 s from
// now and log their runs to execLog, waits for them all and returns each
// one's standard output.
func runChildren(t *testing.T, cfg ProcessConfig, execLog string) []bytes.Buffer {
	t.Helper()
	parts := strings.Split(t.Name(), "/")
	for i, p := range parts {
		parts[i] = "^" + regexp.QuoteMeta(p) + "$"
	}
	startAt := time.Now().Add(1500 * time.Millisecond).UnixMilli()
	outs := make([]bytes.Buffer, cfg.Processes)
	cmds := make([]*exec.Cmd, cfg.Processes)
	for i := range cmds {
		cmd := exec.Command(os.Args[0], "-test.run="+strings.Join(parts, "/"), "-test.count=1")
		cmd.Env = append(append(os.Environ(), cfg.Env...),
			procEnv+"="+strconv.Itoa(i), procTestEnv+"="+t.Name(), procNSEnv+"="+cfg.Namespace,
			procLogEnv+"="+execLog, procKeysEnv+"="+strconv.Itoa(cfg.Keys),
			procGoEnv+"="+strconv.Itoa(cfg.Goroutines), procAtEnv+"="+strconv.FormatInt(startAt, 10))
		cmd.Stdout = &outs[i]
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("process %d: %v\n%s", i, err, outs[i].String())
		}
	}
	return outs
}

// readExecLog returns who ran each key, from the children's shared log,
// and fails the test for a key that ran twice or a number of keys run
// other than keys.
func readExecLog(t *testing.T, execLog string, keys int, all bool) map[string]string {
	t.Helper()
	raw, err := os.ReadFile(execLog)
	if err != nil {
		t.Fatal(err)
	}
	executor := map[string]string{}
	charged := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if line == "" {
			continue
		}
		key, who, _ := strings.Cut(line, " ")
		runs, what := executor, "ran"
		if k, ok := strings.CutPrefix(key, "charge:"); ok {
			key, runs, what = k, charged, "charged"
		}
		if prev, dup := runs[key]; dup {
			t.Errorf("%s %s twice: by %s and by %s", key, what, prev, who)
		}
		runs[key] = who
	}
	if all && len(executor) != keys {
		t.Errorf("%d keys ran, want %d", len(executor), keys)
	}
	return executor
}

// checkResults fails the test unless every caller of every child (their
// output outs: "R key runner" for a result, "E key error" for an error)
// got the result of the run executor names for its key.
func checkResults(t *testing.T, cfg ProcessConfig, executor map[string]string, outs []bytes.Buffer) {
	t.Helper()
	results := map[string]int{}
	for i := range outs {
		sc := bufio.NewScanner(&outs[i])
		for sc.Scan() {
			f := strings.SplitN(sc.Text(), " ", 3)
			if len(f) != 3 {
				continue // test framework output
			}
			switch f[0] {
			case "R":
				if f[2] != executor[f[1]] {
					t.Errorf("%s: a caller got %q, the run was %q's", f[1], f[2], executor[f[1]])
				}
				results[f[1]]++
			case "E":
				t.Errorf("%s: %s", f[1], f[2])
			}
		}
	}
	if cfg.Duplicate != nil || cfg.Steps {
		return // not every caller gets a result
	}
	for k := range cfg.Keys {
		key := fmt.Sprint("key-", k)
		if want := cfg.Processes * cfg.Goroutines; results[key] != want {
			t.Errorf("%s: %d callers got a result, want %d", key, results[key], want)
		}
	}
}

// errFirstAttempt is the error of a call's first attempt under
// ProcessConfig.Steps.
var errFirstAttempt = errors.New("storetest: the first attempt fails after its step")

// processChild is the work of one child of runProcesses; it returns the
// process's exit status.
func processChild(cfg ProcessConfig) int {
	proc := os.Getenv(procEnv)
	nkeys, _ := strconv.Atoi(os.Getenv(procKeysEnv))
	ngo, _ := strconv.Atoi(os.Getenv(procGoEnv))
	startAt, _ := strconv.ParseInt(os.Getenv(procAtEnv), 10, 64)
	logFile, err := os.OpenFile(os.Getenv(procLogEnv), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer logFile.Close()
	store, err := cfg.NewStore(os.Getenv(procNSEnv))
	if err != nil {
		fmt.Fprintln(os.Stderr, "NewStore:", err)
		return 2
	}
	dup := idem.Wait
	if cfg.Duplicate != nil {
		dup = *cfg.Duplicate
	}
	opts := append(append([]idem.Option(nil), cfg.Options...), idem.OnDuplicate(dup))
	time.Sleep(time.Until(time.UnixMilli(startAt)))

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	defer out.Flush()
	var wg sync.WaitGroup
	for gi := range ngo {
		g, err := idem.New[string](store, opts...)
		if err != nil {
			fmt.Fprintln(os.Stderr, "idem.New:", err)
			return 2
		}
		me := fmt.Sprintf("p%s-g%d", proc, gi)
		wg.Go(func() {
			for _, k := range rand.Perm(nkeys) {
				key := fmt.Sprint("key-", k)
				v, err := g.Do(ctx, key, func(ctx context.Context) (string, error) {
					if cfg.Steps {
						if _, err := idem.Step(ctx, "charge", func(context.Context) (string, error) {
							_, err := fmt.Fprintf(logFile, "charge:%s %s\n", key, me)
							return me, err
						}); err != nil {
							return "", err
						}
						if tok, _ := idem.FencingToken(ctx); tok == 1 {
							time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond)
							return "", errFirstAttempt
						}
					}
					// One write(2) per line: O_APPEND keeps lines whole.
					if _, err := fmt.Fprintf(logFile, "%s %s\n", key, me); err != nil {
						return "", err
					}
					time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond)
					return me, nil
				})
				mu.Lock()
				switch {
				case errors.Is(err, errFirstAttempt), cfg.Duplicate != nil && (errors.Is(err, idem.ErrInProgress) || errors.Is(err, idem.ErrDuplicate)):
					fmt.Fprintf(out, "I %s -\n", key) // no result, as the policy allows
				case err != nil:
					fmt.Fprintf(out, "E %s %v\n", key, strings.ReplaceAll(err.Error(), "\n", " "))
				default:
					fmt.Fprintf(out, "R %s %s\n", key, v)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return 0
}
