// The tests run commands with sh and signal process groups.

//go:build unix

package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

// background starts an invocation and returns a channel that delivers it.
func background(ctx context.Context, e env, args ...string) <-chan invocation {
	ch := make(chan invocation, 1)
	go func() { ch <- invoke(ctx, e, args...) }()
	return ch
}

// holding returns a command that records its start in $DIR/started and then
// runs until $DIR/release exists, and prints "done".
func holding(dir string) []string {
	return []string{"--", "sh", "-c", `echo run >> "$COUNTER"; : > "$DIR/started"; while [ ! -e "$DIR/release" ]; do sleep 0.02; done; echo done`}
}

func TestInProgress(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			e := env{"COUNTER": filepath.Join(dir, "counter"), "DIR": dir, "IDEM_STORE": storeSpec(t, kind)}
			first := background(context.Background(), e, append([]string{"run", "-key", "k"}, holding(dir)...)...)
			waitForFile(t, filepath.Join(dir, "started"))

			cases := []struct {
				args      []string
				code      int
				stderrHas string
			}{
				{[]string{"run", "-key", "k"}, exitInProgress, "in progress"},
				{[]string{"run", "-on-duplicate", "raise", "-key", "k"}, exitInProgress, "in progress"},
				{[]string{"run", "-in-progress-exit", "0", "-q", "-key", "k"}, 0, ""},
				{[]string{"run", "-on-duplicate", "wait", "-wait-timeout", "100ms", "-key", "k"}, exitInProgress, "-wait-timeout"},
				{[]string{"unlock", "-key", "k", "-force", "-store", "mem:unrelated"}, exitNoRecord, "no live record"},
			}
			for _, c := range cases {
				args := c.args
				if args[0] == "run" {
					args = append(args[:len(args):len(args)], "--", "sh", "-c", `echo run >> "$COUNTER"`)
				}
				iv := invoke(context.Background(), e, args...)
				if iv.code != c.code || (c.stderrHas == "" && iv.stderr != "") || !strings.Contains(iv.stderr, c.stderrHas) || iv.stdout != "" {
					t.Errorf("%q: %v; want exit %d, stderr %q", c.args, iv, c.code, c.stderrHas)
				}
			}

			var insp record
			iv := invoke(context.Background(), e, "inspect", "-key", "k")
			if iv.code != 0 {
				t.Fatalf("inspect: %v", iv)
			}
			if err := json.Unmarshal([]byte(iv.stdout), &insp); err != nil {
				t.Fatal(err)
			}
			if insp.Status != storekit.StatusInProgress || insp.Attempt != 1 || insp.HeartbeatAgeMs == nil || insp.Stale == nil || *insp.Stale || insp.ExitCode != nil {
				t.Errorf("inspect of a run in progress: %s", iv.stdout)
			}
			if iv := invoke(context.Background(), e, "inspect", "-stdout", "-key", "k"); iv.code != exitInProgress {
				t.Errorf("inspect -stdout in progress: %v", iv)
			}

			// Waiters started now get the first run's outcome.
			var waiters []<-chan invocation
			for range 3 {
				waiters = append(waiters, background(context.Background(), e, "run", "-on-duplicate", "wait", "-key", "k", "--", "sh", "-c", `echo run >> "$COUNTER"; echo waiter`))
			}
			time.Sleep(50 * time.Millisecond)
			if err := os.WriteFile(filepath.Join(dir, "release"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			if iv := <-first; iv.code != 0 || iv.stdout != "done\n" {
				t.Fatalf("first run: %v", iv)
			}
			for _, w := range waiters {
				if iv := <-w; iv.code != 0 || iv.stdout != "done\n" {
					t.Errorf("waiter: %v", iv)
				}
			}
			if n := lines(t, e["COUNTER"]); n != 1 {
				t.Errorf("the command ran %d times, want 1", n)
			}
		})
	}
}

// TestConcurrentRuns runs many invocations of one key at once, each with its
// own Guard on one store: the command runs once.
func TestConcurrentRuns(t *testing.T) {
	for _, kind := range storeKinds {
		for _, policy := range []string{"return", "wait"} {
			t.Run(kind+"/"+policy, func(t *testing.T) {
				dir := t.TempDir()
				e := env{"COUNTER": filepath.Join(dir, "counter"), "IDEM_STORE": storeSpec(t, kind)}
				const n = 16
				var wg sync.WaitGroup
				results := make([]invocation, n)
				for i := range n {
					wg.Add(1)
					go func() {
						defer wg.Done()
						results[i] = invoke(context.Background(), e, "run", "-on-duplicate", policy, "-key", "k", "--",
							"sh", "-c", `echo run >> "$COUNTER"; sleep 0.2; echo out`)
					}()
				}
				wg.Wait()
				if c := lines(t, e["COUNTER"]); c != 1 {
					t.Fatalf("the command ran %d times, want 1", c)
				}
				for _, iv := range results {
					ok := iv.code == 0 && iv.stdout == "out\n"
					if policy == "return" && iv.code == exitInProgress && iv.stdout == "" {
						ok = true
					}
					if !ok {
						t.Errorf("%v", iv)
					}
				}
			})
		}
	}
}

// TestOwnershipLost deletes the record of a running command: at its next
// heartbeat the run learns it lost the claim, stops the command and exits 76.
func TestOwnershipLost(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			e := env{"COUNTER": filepath.Join(dir, "counter"), "DIR": dir, "IDEM_STORE": storeSpec(t, kind)}
			first := background(context.Background(), e, append([]string{"run", "-heartbeat", "50ms", "-takeover-after", "5s", "-kill-grace", "5s", "-key", "k"}, holding(dir)...)...)
			waitForFile(t, filepath.Join(dir, "started"))
			if iv := invoke(context.Background(), e, "unlock", "-force", "-key", "k"); iv.code != 0 {
				t.Fatalf("unlock -force: %v", iv)
			}
			select {
			case iv := <-first:
				if iv.code != exitLost || !strings.Contains(iv.stderr, "lost the claim") || iv.stdout != "" {
					t.Fatalf("run: %v; want exit %d", iv, exitLost)
				}
			case <-time.After(30 * time.Second):
				t.Fatal("the run did not stop after losing its claim")
			}
		})
	}
}

// TestUnlockReleases releases a claim left in progress: the next run runs
// at once with the next fencing token.
func TestUnlockReleases(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			e := env{"COUNTER": filepath.Join(dir, "counter"), "DIR": dir, "IDEM_STORE": storeSpec(t, kind)}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			first := background(ctx, e, append([]string{"run", "-key", "k"}, holding(dir)...)...)
			waitForFile(t, filepath.Join(dir, "started"))
			iv := invoke(context.Background(), e, "unlock", "-key", "k")
			if iv.code != 0 || !strings.Contains(iv.stdout, "released the claim (attempt 1") {
				t.Fatalf("unlock: %v", iv)
			}
			if iv := invoke(context.Background(), e, "unlock", "-key", "k"); iv.code != exitNoRecord {
				t.Fatalf("second unlock: %v", iv)
			}
			iv = invoke(context.Background(), e, "run", "-key", "k", "--", "sh", "-c", `echo "$IDEM_FENCING_TOKEN"`)
			if iv.code != 0 || iv.stdout != "2\n" {
				t.Fatalf("run after unlock: %v", iv)
			}
			// Interrupting the first run stops its command (SIGTERM).
			cancel()
			if iv := <-first; iv.code == 0 {
				t.Fatalf("interrupted first run: %v", iv)
			}
		})
	}
}

func TestInspect(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			e := env{"COUNTER": filepath.Join(dir, "counter"), "IDEM_STORE": storeSpec(t, kind)}
			if iv := invoke(context.Background(), e, "inspect", "-key", "k"); iv.code != exitNoRecord || iv.stdout != "" {
				t.Fatalf("inspect of a missing key: %v", iv)
			}
			before := time.Now().UnixMilli()
			args := []string{"run", "-tenant", "t1", "-scope", "s1", "-payload", "p", "-ttl", "1h", "-key", "user key", "--", "printf", "hello"}
			if iv := invoke(context.Background(), e, args...); iv.code != 0 {
				t.Fatal(iv)
			}
			iv := invoke(context.Background(), e, "inspect", "-tenant", "t1", "-scope", "s1", "-key", "user key")
			if iv.code != 0 {
				t.Fatal(iv)
			}
			var raw map[string]any
			if err := json.Unmarshal([]byte(iv.stdout), &raw); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"nonce", "result", "stdout"} {
				if _, ok := raw[name]; ok {
					t.Errorf("inspect prints %q: %s", name, iv.stdout)
				}
			}
			var r record
			if err := json.Unmarshal([]byte(iv.stdout), &r); err != nil {
				t.Fatal(err)
			}
			if r.Key != "user key" || r.Tenant != "t1" || r.Scope != "s1" || !strings.HasPrefix(r.StorageKey, storekit.StorageKeyPrefix) ||
				r.Status != storekit.StatusCompleted || r.Attempt != 1 || r.PayloadHash == "" || r.ResultBytes == 0 ||
				r.ExitCode == nil || *r.ExitCode != 0 || *r.StdoutBytes != 5 || *r.StdoutTotal != 5 || *r.Truncated ||
				r.HeartbeatAgeMs != nil || r.Stale != nil {
				t.Errorf("inspect: %s", iv.stdout)
			}
			if r.StartedAtMs < before || r.CompletedAtMs < r.StartedAtMs || r.ExpiresAtMs-r.CompletedAtMs != time.Hour.Milliseconds() {
				t.Errorf("times: %s", iv.stdout)
			}
			for _, ts := range []struct {
				s  string
				ms int64
			}{{r.StartedAt, r.StartedAtMs}, {r.HeartbeatAt, r.HeartbeatAtMs}, {r.CompletedAt, r.CompletedAtMs}, {r.ExpiresAt, r.ExpiresAtMs}} {
				p, err := time.Parse(time.RFC3339, ts.s)
				if err != nil || p.UnixMilli() != ts.ms {
					t.Errorf("time %q does not match %d ms (%v)", ts.s, ts.ms, err)
				}
			}
			if strings.Count(iv.stdout, "user key") != 1 {
				t.Errorf("the key appears other than as typed: %s", iv.stdout)
			}
			if iv := invoke(context.Background(), e, "inspect", "-stdout", "-tenant", "t1", "-scope", "s1", "-key", "user key"); iv.code != 0 || iv.stdout != "hello" {
				t.Errorf("inspect -stdout: %v", iv)
			}
			if iv := invoke(context.Background(), e, "inspect", "-key", "user key"); iv.code != exitNoRecord {
				t.Errorf("inspect without the namespace: %v", iv)
			}
		})
	}
}

func TestPurge(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "records")
	e := env{"IDEM_STORE": "file:" + dir}
	for _, k := range []string{"a", "b", "c"} {
		if iv := invoke(context.Background(), e, "run", "-ttl", "1ms", "-key", k, "--", "true"); iv.code != 0 {
			t.Fatal(iv)
		}
	}
	if iv := invoke(context.Background(), e, "run", "-key", "kept", "--", "true"); iv.code != 0 {
		t.Fatal(iv)
	}
	time.Sleep(5 * time.Millisecond)
	if iv := invoke(context.Background(), e, "purge", "-grace", "1h"); iv.code != 0 || !strings.Contains(iv.stdout, "purged 0 ") {
		t.Errorf("purge with grace: %v", iv)
	}
	if iv := invoke(context.Background(), e, "purge"); iv.code != 0 || !strings.Contains(iv.stdout, "purged 3 expired records from "+dir) {
		t.Errorf("purge: %v", iv)
	}
	if iv := invoke(context.Background(), e, "inspect", "-key", "kept"); iv.code != 0 {
		t.Errorf("purge removed a live record: %v", iv)
	}

	for _, c := range []struct{ store, has string }{
		{"mem:" + t.Name(), "purged 0"},
		{"redis://127.0.0.1:1/0", "Redis deletes expired records itself"},
		{"redis-cluster://127.0.0.1:1", "Redis deletes expired records itself"},
	} {
		if iv := invoke(context.Background(), env{}, "purge", "-store", c.store); iv.code != 0 || !strings.Contains(iv.stdout, c.has) {
			t.Errorf("purge %s: %v", c.store, iv)
		}
	}
	if iv := invoke(context.Background(), env{}, "purge", "-grace", "-1s", "-store", "mem:"); iv.code != exitUsage {
		t.Errorf("negative grace: %v", iv)
	}
}

func TestStoreSpecs(t *testing.T) {
	unsafe := t.TempDir()
	if err := os.Chmod(unsafe, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		spec      string
		code      int
		stderrHas string
	}{
		{"nonsense", exitConfig, "want one of file:DIR"},
		{"ftp://host/x", exitConfig, "unknown store kind \"ftp\"; the kinds are file:DIR"},
		{"file://otherhost/x", exitConfig, "local"},
		{"file:" + unsafe, exitConfig, "writable"},
		{"redis://user:hunter2@127.0.0.1:1/0?bogus=1", exitConfig, "xxxxx"},
		{"redis://127.0.0.1:1/0", exitUnavailable, "connect"},
		{"dynamodb://", exitConfig, "want dynamodb://TABLE"},
		{"dynamodb://t?colour=red", exitConfig, "unknown parameter colour"},
		{"dynamodb://t?create=maybe", exitConfig, "create must be"},
	} {
		iv := invoke(context.Background(), env{}, "run", "-store", c.spec, "-key", "k", "--", "true")
		if iv.code != c.code || !strings.Contains(iv.stderr, c.stderrHas) || strings.Contains(iv.stderr, "hunter2") {
			t.Errorf("%s: %v; want exit %d and %q", c.spec, iv, c.code, c.stderrHas)
		}
	}
}

func TestKey(t *testing.T) {
	type args = []any
	for _, c := range []struct {
		argv []string
		name string
		args args
	}{
		{[]string{"invoice", "42", `"EUR"`}, "invoice", args{42, "EUR"}},
		{[]string{"invoice"}, "invoice", args{}},
		{[]string{"-s", "report", "2024-05-01", "42"}, "report", args{"2024-05-01", "42"}},
		{[]string{"m", `{"b":1,"a":[true,null]}`}, "m", args{map[string]any{"a": []any{true, nil}, "b": 1}}},
		{[]string{"big", "9007199254740992"}, "big", args{json.Number("9007199254740992")}},
		// After "--" every word is NAME or ARG, even one that looks like a flag.
		{[]string{"--", "-s", "1"}, "-s", args{1}},
		{[]string{"--", "--", "0"}, "--", args{0}},
	} {
		want, err := idem.Key(c.name, c.args...)
		if err != nil {
			t.Fatal(err)
		}
		iv := invoke(context.Background(), env{}, append([]string{"key"}, c.argv...)...)
		if iv.code != 0 || iv.stdout != want+"\n" {
			t.Errorf("key %q: %v; want %s", c.argv, iv, want)
		}
	}
	for _, argv := range [][]string{{"key"}, {"key", "n", "bare"}, {"key", "n", "1 2"}, {"key", ""}, {"key", "n", "{"},
		// A whole number no double holds exactly has no canonical (RFC 8785)
		// form: another language could not derive the same key.
		{"key", "big", "12345678901234567890"}} {
		if iv := invoke(context.Background(), env{}, argv...); iv.code != exitUsage {
			t.Errorf("%q: %v; want exit %d", argv, iv, exitUsage)
		}
	}
}

func TestParseSize(t *testing.T) {
	for in, want := range map[string]int64{"0": 0, "512": 512, "4k": 4096, "64KiB": 64 << 10, "1MiB": 1 << 20, "2 MB": 2 << 20, "1g": 1 << 30, "10b": 10} {
		if got, err := parseSize(in); err != nil || got != want {
			t.Errorf("parseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "x", "1.5M", "99999999999G"} {
		if _, err := parseSize(in); err == nil {
			t.Errorf("parseSize(%q) succeeded", in)
		}
	}
}

// TestAdminExtraArguments: inspect, unlock and purge take flags only; a
// word left over is a usage error that names the subcommand.
func TestAdminExtraArguments(t *testing.T) {
	for _, args := range [][]string{
		{"inspect", "-store", "mem:", "-key", "k", "extra"},
		{"unlock", "-store", "mem:", "-key", "k", "extra"},
		{"purge", "-store", "mem:", "extra"},
	} {
		iv := invoke(context.Background(), env{}, args...)
		if iv.code != exitUsage || !strings.Contains(iv.stderr, "idem "+args[0]+": unexpected arguments [\"extra\"]") {
			t.Errorf("%s: %v", args[0], iv)
		}
	}
}

// TestInterruptedRunNotLocked: under -on-failure lock, a run whose idem is
// interrupted (SIGINT, SIGTERM, SIGHUP: here its context ends) stops its
// command and releases the claim; the interruption is not recorded as the
// key's failure, so the next run runs the command. A -timeout is the run's
// own limit and is recorded like any failure.
func TestInterruptedRunNotLocked(t *testing.T) {
	for _, kind := range storeKinds {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			e := env{"COUNTER": filepath.Join(dir, "counter"), "DIR": dir, "IDEM_STORE": storeSpec(t, kind)}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			first := background(ctx, e, append([]string{"run", "-on-failure", "lock", "-key", "k"}, holding(dir)...)...)
			waitForFile(t, filepath.Join(dir, "started"))
			cancel()
			iv := <-first
			if iv.code != 128+15 || !strings.Contains(iv.stderr, "not recorded") {
				t.Fatalf("interrupted run: %v", iv)
			}
			iv = invoke(context.Background(), e, "run", "-on-failure", "lock", "-key", "k", "--", "sh", "-c", `echo "$IDEM_FENCING_TOKEN"`)
			if iv.code != 0 || iv.stdout != "2\n" {
				t.Fatalf("run after the interrupted one: %v (the interruption was recorded as the key's failure)", iv)
			}

			iv = invoke(context.Background(), e, "run", "-on-failure", "lock", "-timeout", "50ms", "-key", "t", "--", "sleep", "60")
			if iv.code != 128+15 {
				t.Fatalf("timed-out run: %v", iv)
			}
			iv = invoke(context.Background(), e, "run", "-on-failure", "lock", "-key", "t", "--", "true")
			if iv.code != 128+15 {
				t.Fatalf("a -timeout failure is recorded under lock: %v", iv)
			}
		})
	}
}
