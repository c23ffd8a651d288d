// The tests run commands with sh and signal process groups.

//go:build unix

package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// invocation is one in-process run of the command line.
type invocation struct {
	code           int
	stdout, stderr string
}

// env is the environment of an invocation on top of the test process's own.
type env map[string]string

func invoke(ctx context.Context, e env, args ...string) invocation {
	var out, errb bytes.Buffer
	c := &cli{
		stdout: &out, stderr: &errb,
		getenv: func(name string) string {
			if v, ok := e[name]; ok {
				return v
			}
			if name == "IDEM_SECRET" || name == "IDEM_PREVIOUS_SECRETS" || name == "IDEM_STORE" {
				return ""
			}
			return os.Getenv(name)
		},
		environ: func() []string {
			vars := os.Environ()
			for k, v := range e {
				vars = append(vars, k+"="+v)
			}
			return vars
		},
	}
	code := c.main(ctx, args)
	return invocation{code, out.String(), errb.String()}
}

func (iv invocation) String() string {
	return fmt.Sprintf("exit %d, stdout %q, stderr %q", iv.code, iv.stdout, iv.stderr)
}

// memSeq makes the mem: stores of repeated tests (-count) distinct.
var memSeq atomic.Int64

// storeKinds are the stores the in-process tests run against.
var storeKinds = []string{"mem", "file"}

// storeSpec returns a fresh store of kind for the test t.
func storeSpec(t *testing.T, kind string) string {
	if kind == "mem" {
		return fmt.Sprintf("mem:%s-%d", t.Name(), memSeq.Add(1))
	}
	return "file:" + filepath.Join(t.TempDir(), "records")
}

// lines counts the lines of a file (0 if it does not exist).
func lines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), "\n")
}

// waitForFile waits until path exists.
func waitForFile(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%s did not appear", path)
}

// step is one invocation of a scenario and what it must give.
type step struct {
	args      []string
	env       env
	code      int
	stdout    string // exact, unless "*"
	stderrHas string // substring of standard error
	runs      int    // the counter after the step
	stdoutHas string // substring of standard output
}

// counting is a command that counts its runs in $COUNTER, then prints and
// exits as told by its arguments.
const counting = `echo run >> "$COUNTER"; printf '%s' "$1"; exit "$2"`

func countCmd(out string, exit int) []string {
	return []string{"--", "sh", "-c", counting, "sh", out, fmt.Sprint(exit)}
}

// A scenario is a list of invocations on one fresh store.
type scenario struct {
	name  string
	steps []step
}

// runScenarios are runs of commands: replays, failures, payloads, and the
// namespaces and secrets that separate keys.
func runScenarios() []scenario {
	return []scenario{
		{"fresh then replay", []step{
			{args: append([]string{"run", "-key", "k"}, countCmd("hello\n", 0)...), stdout: "hello\n", runs: 1},
			{args: append([]string{"run", "-key", "k"}, countCmd("other\n", 0)...), stdout: "hello\n", runs: 1},
			{args: append([]string{"run", "-key", "k2"}, countCmd("two\n", 0)...), stdout: "two\n", runs: 2},
		}},
		{"failure unlocks by default", []step{
			{args: append([]string{"run", "-key", "k"}, countCmd("bad\n", 3)...), code: 3, stdout: "bad\n", runs: 1},
			{args: append([]string{"run", "-key", "k"}, countCmd("good\n", 0)...), stdout: "good\n", runs: 2},
			{args: append([]string{"run", "-key", "k"}, countCmd("again\n", 0)...), stdout: "good\n", runs: 2},
		}},
		{"failure locked is replayed", []step{
			{args: append([]string{"run", "-on-failure", "lock", "-key", "k"}, countCmd("bad\n", 3)...), code: 3, stdout: "bad\n", runs: 1},
			{args: append([]string{"run", "-key", "k"}, countCmd("good\n", 0)...), code: 3, stdout: "bad\n", runs: 1},
			{args: []string{"inspect", "-key", "k"}, stdoutHas: `"exit_code": 3`, runs: 1},
		}},
		{"raise on a completed key", []step{
			{args: append([]string{"run", "-key", "k"}, countCmd("x", 0)...), stdout: "x", runs: 1},
			{args: append([]string{"run", "-on-duplicate", "raise", "-key", "k"}, countCmd("y", 0)...), code: exitDuplicate, stderrHas: "already ran", runs: 1},
		}},
		{"silent replay keeps the exit status", []step{
			{args: append([]string{"run", "-on-failure", "lock", "-key", "k"}, countCmd("x", 4)...), code: 4, stdout: "x", runs: 1},
			{args: append([]string{"run", "-silent-replay", "-key", "k"}, countCmd("y", 0)...), code: 4, stdout: "", runs: 1},
		}},
		{"payload must match", []step{
			{args: append([]string{"run", "-payload", "a=1", "-key", "k"}, countCmd("x", 0)...), stdout: "x", runs: 1},
			{args: append([]string{"run", "-payload", "a=2", "-key", "k"}, countCmd("y", 0)...), code: exitMismatch, stderrHas: "different -payload", runs: 1},
			{args: append([]string{"run", "-key", "k"}, countCmd("y", 0)...), code: exitMismatch, runs: 1},
			{args: append([]string{"run", "-payload", "a=1", "-key", "k"}, countCmd("y", 0)...), stdout: "x", runs: 1},
			{args: []string{"inspect", "-key", "k"}, stdoutHas: `"payload_hash": "`, runs: 1},
		}},
		{"empty payload differs from none", []step{
			{args: append([]string{"run", "-payload", "", "-key", "k"}, countCmd("x", 0)...), stdout: "x", runs: 1},
			{args: append([]string{"run", "-key", "k"}, countCmd("y", 0)...), code: exitMismatch, runs: 1},
		}},
		{"namespaces separate keys", []step{
			{args: append([]string{"run", "-tenant", "a", "-key", "k"}, countCmd("a", 0)...), stdout: "a", runs: 1},
			{args: append([]string{"run", "-tenant", "b", "-key", "k"}, countCmd("b", 0)...), stdout: "b", runs: 2},
			{args: append([]string{"run", "-tenant", "a", "-scope", "s", "-key", "k"}, countCmd("s", 0)...), stdout: "s", runs: 3},
			{args: append([]string{"run", "-tenant", "a", "-key", "k"}, countCmd("z", 0)...), stdout: "a", runs: 3},
		}},
		{"secrets separate keys", []step{
			{env: env{"IDEM_SECRET": "secret-one-0123456789"}, args: append([]string{"run", "-require-secret", "-key", "k"}, countCmd("1", 0)...), stdout: "1", runs: 1},
			{env: env{"IDEM_SECRET": "secret-two-0123456789"}, args: append([]string{"run", "-key", "k"}, countCmd("2", 0)...), stdout: "2", runs: 2},
			{env: env{"IDEM_SECRET": "secret-one-0123456789"}, args: append([]string{"run", "-key", "k"}, countCmd("3", 0)...), stdout: "1", runs: 2},
			{args: append([]string{"run", "-require-secret", "-key", "k"}, countCmd("4", 0)...), code: exitConfig, stderrHas: "IDEM_SECRET", runs: 2},
		}},
		{"a rotated secret finds the old record", []step{
			{env: env{"IDEM_SECRET": "secret-one-0123456789"}, args: append([]string{"run", "-key", "k"}, countCmd("1", 0)...), stdout: "1", runs: 1},
			{env: env{"IDEM_SECRET": "secret-two-0123456789", "IDEM_PREVIOUS_SECRETS": "secret-one-0123456789"}, args: append([]string{"run", "-key", "k"}, countCmd("2", 0)...), stdout: "1", runs: 1},
			{env: env{"IDEM_SECRET": "secret-two-0123456789", "IDEM_PREVIOUS_SECRETS": "secret-zero-0123456789,secret-one-0123456789"}, args: append([]string{"run", "-key", "k"}, countCmd("3", 0)...), stdout: "1", runs: 1},
			{env: env{"IDEM_PREVIOUS_SECRETS": "secret-one-0123456789"}, args: append([]string{"run", "-key", "k"}, countCmd("4", 0)...), code: exitConfig, stderrHas: "IDEM_SECRET", runs: 1},
			{env: env{"IDEM_SECRET": "secret-two-0123456789", "IDEM_PREVIOUS_SECRETS": "secret-two-0123456789"}, args: append([]string{"run", "-key", "k"}, countCmd("5", 0)...), code: exitUsage, stderrHas: "is the active secret", runs: 1},
		}},
	}
}

// commandScenarios are what happens to the command: not found, not
// executable, its output bounded, timed out, killed, and its record unlocked.
func commandScenarios() []scenario {
	return []scenario{
		{"command not found is never recorded", []step{
			{args: []string{"run", "-on-failure", "lock", "-key", "k", "--", "idem-no-such-command"}, code: exitNotFound, stderrHas: "idem-no-such-command", runs: 0},
			{args: append([]string{"run", "-key", "k"}, countCmd("ok", 0)...), stdout: "ok", runs: 1},
		}},
		{"command not executable", []step{
			{args: []string{"run", "-key", "k", "--", "/"}, code: exitCannotExec, runs: 0},
			{args: []string{"inspect", "-key", "k"}, code: exitNoRecord, runs: 0},
		}},
		{"output is bounded", []step{
			{args: append([]string{"run", "-max-output", "4", "-key", "k"}, countCmd("0123456789", 0)...), stdout: "0123456789", runs: 1},
			{args: append([]string{"run", "-key", "k"}, countCmd("x", 0)...), stdout: "0123", stderrHas: "truncated: 4 of 10 bytes", runs: 1},
			{args: []string{"inspect", "-key", "k"}, stdoutHas: `"stdout_truncated": true`, runs: 1},
			{args: []string{"inspect", "-stdout", "-key", "k"}, stdout: "0123", runs: 1},
		}},
		{"no output recorded", []step{
			{args: append([]string{"run", "-max-output", "0", "-key", "k"}, countCmd("abc", 0)...), stdout: "abc", runs: 1},
			{args: append([]string{"run", "-key", "k"}, countCmd("x", 0)...), stdout: "", stderrHas: "0 of 3", runs: 1},
		}},
		{"timeout stops the command", []step{
			{args: []string{"run", "-timeout", "200ms", "-on-failure", "lock", "-key", "k", "--", "sh", "-c", `echo run >> "$COUNTER"; exec sleep 30`}, code: 128 + 15, runs: 1},
			{args: append([]string{"run", "-key", "k"}, countCmd("x", 0)...), code: 128 + 15, runs: 1},
		}},
		{"kill after the grace", []step{
			{args: []string{"run", "-timeout", "100ms", "-kill-grace", "200ms", "-key", "k", "--", "sh", "-c", `trap '' TERM; echo run >> "$COUNTER"; sleep 30; echo survived`}, code: 128 + 9, runs: 1},
		}},
		{"fencing token and environment", []step{
			{env: env{"IDEM_SECRET": "secret-s-0123456789"}, args: []string{"run", "-key", "k", "--", "sh", "-c", `echo run >> "$COUNTER"; echo "$IDEM_FENCING_TOKEN ${IDEM_SECRET:-nosecret} ${#IDEM_STORAGE_KEY}"; exit 1`}, code: 1, stdout: "1 nosecret 69\n", runs: 1},
			{env: env{"IDEM_SECRET": "secret-s-0123456789"}, args: []string{"run", "-key", "k", "--", "sh", "-c", `echo run >> "$COUNTER"; echo "$IDEM_FENCING_TOKEN"`}, stdout: "2\n", runs: 2},
		}},
		{"unlock", []step{
			{args: []string{"unlock", "-key", "k"}, code: exitNoRecord, runs: 0},
			{args: append([]string{"run", "-key", "k"}, countCmd("x", 0)...), stdout: "x", runs: 1},
			{args: []string{"unlock", "-key", "k"}, code: exitRefused, stderrHas: "-force", runs: 1},
			{args: []string{"unlock", "-force", "-key", "k"}, stdoutHas: "deleted the completed record", runs: 1},
			{args: []string{"inspect", "-key", "k"}, code: exitNoRecord, runs: 1},
			{args: append([]string{"run", "-key", "k"}, countCmd("y", 0)...), stdout: "y", runs: 2},
		}},
	}
}

// usageScenario is the usage and every flag error.
func usageScenario() scenario {
	return scenario{"usage", []step{
		{args: []string{}, code: exitUsage, stderrHas: "Usage:"},
		{args: []string{"-h"}, stdoutHas: "idem run [flags] -key KEY"},
		{args: []string{"help"}, stdoutHas: "Exit status"},
		{args: []string{"frobnicate"}, code: exitUsage, stderrHas: `unknown subcommand "frobnicate"`},
		{args: []string{"run", "-h"}, stderrHas: "-on-duplicate"},
		{args: []string{"run", "--", "true"}, code: exitUsage, stderrHas: "-key is required"},
		{args: []string{"run", "-key", "k"}, code: exitUsage, stderrHas: "no COMMAND"},
		{args: []string{"run", "-key", "k", "-bogus", "--", "true"}, code: exitUsage, stderrHas: "-bogus"},
		{args: []string{"run", "-key", "k", "-on-duplicate", "ignore", "--", "true"}, code: exitUsage, stderrHas: "-on-duplicate"},
		{args: []string{"run", "-key", "k", "-on-failure", "retry", "--", "true"}, code: exitUsage, stderrHas: "-on-failure"},
		{args: []string{"run", "-key", "k", "-heartbeat", "1m", "--", "true"}, code: exitUsage, stderrHas: "idem: -heartbeat: "},
		{args: []string{"run", "-key", "k", "-ttl", "-1s", "--", "true"}, code: exitUsage, stderrHas: "idem: -ttl: "},
		{args: []string{"run", "-key", "k", "-max-output", "lots", "--", "true"}, code: exitUsage, stderrHas: "invalid size"},
		{args: []string{"run", "-key", "k", "-in-progress-exit", "300", "--", "true"}, code: exitUsage},
		{args: []string{"run", "-key", strings.Repeat("k", 4096+1), "--", "true"}, code: exitUsage, stderrHas: "-key"},
		{args: []string{"inspect"}, code: exitUsage, stderrHas: "-key is required"},
		{args: []string{"inspect", "-key", "k", "extra"}, code: exitUsage},
		{args: []string{"unlock", "-key", "k", "extra"}, code: exitUsage},
		{args: []string{"purge", "extra"}, code: exitUsage},
		{args: []string{"key"}, code: exitUsage, stderrHas: "no NAME"},
	}}
}

func TestRunScenarios(t *testing.T) {
	scenarios := append(runScenarios(), commandScenarios()...)
	scenarios = append(scenarios, usageScenario())
	for _, sc := range scenarios {
		for _, kind := range storeKinds {
			t.Run(sc.name+"/"+kind, func(t *testing.T) {
				spec := storeSpec(t, kind)
				dir := t.TempDir()
				counter := filepath.Join(dir, "counter")
				for i, s := range sc.steps {
					checkStep(t, i, s, spec, counter)
				}
			})
		}
	}
}

// checkStep invokes step i of a scenario on the store spec and checks its
// exit status, its output and how many times the command ran in all.
func checkStep(t *testing.T, i int, s step, spec, counter string) {
	t.Helper()
	e := env{"COUNTER": counter, "IDEM_STORE": spec}
	for k, v := range s.env {
		e[k] = v
	}
	iv := invoke(context.Background(), e, s.args...)
	if iv.code != s.code {
		t.Fatalf("step %d %q: %v; want exit %d", i, s.args, iv, s.code)
	}
	if s.stdout != "*" && s.stdoutHas == "" && iv.stdout != s.stdout {
		t.Fatalf("step %d %q: %v; want stdout %q", i, s.args, iv, s.stdout)
	}
	if !strings.Contains(iv.stdout, s.stdoutHas) {
		t.Fatalf("step %d %q: %v; want stdout containing %q", i, s.args, iv, s.stdoutHas)
	}
	if !strings.Contains(iv.stderr, s.stderrHas) {
		t.Fatalf("step %d %q: %v; want stderr containing %q", i, s.args, iv, s.stderrHas)
	}
	if n := lines(t, counter); n != s.runs {
		t.Fatalf("step %d %q: %v; the command ran %d times, want %d", i, s.args, iv, n, s.runs)
	}
}
