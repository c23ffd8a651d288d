// The tests run commands with sh and signal process groups.

//go:build unix

package main

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/internal/testenv"
)

// binPath is the idem binary built for the end-to-end tests.
var binPath string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "idem-cli-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := func() int {
		defer os.RemoveAll(dir)
		binPath = filepath.Join(dir, "idem")
		// go test puts the go command of its own toolchain first in PATH.
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "building idem: %v\n%s", err, out)
			return 1
		}
		return m.Run()
	}()
	os.Exit(code)
}

// proc is the idem binary running in a child process.
type proc struct {
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
}

func startBin(t *testing.T, e env, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(binPath, args...)}
	p.cmd.Env = os.Environ()
	for k, v := range e {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	// A command that outlives idem must not hold the test up through the
	// output pipes it inherited.
	p.cmd.WaitDelay = 2 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if p.cmd.ProcessState == nil {
			_ = p.cmd.Process.Kill()
			_ = p.cmd.Wait()
		}
	})
	return p
}

// wait waits for the process and returns how it ended.
func (p *proc) wait(t *testing.T) invocation {
	t.Helper()
	err := p.cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	return invocation{p.cmd.ProcessState.ExitCode(), p.stdout.String(), p.stderr.String()}
}

func runBin(t *testing.T, e env, args ...string) invocation {
	t.Helper()
	return startBin(t, e, args...).wait(t)
}

func randomKey(t *testing.T) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	return t.Name() + "-" + hex.EncodeToString(b[:])
}

// concurrentOnce starts n processes running one key at once, each appending
// to a counter file, and checks that the command ran once and that every
// process printed its output.
func concurrentOnce(t *testing.T, store string, n int) {
	dir := t.TempDir()
	e := env{"COUNTER": filepath.Join(dir, "counter")}
	key := randomKey(t)
	procs := make([]*proc, n)
	for i := range procs {
		procs[i] = startBin(t, e, "run", "-store", store, "-on-duplicate", "wait", "-key", key, "--",
			"sh", "-c", `echo "$$" >> "$COUNTER"; sleep 0.3; echo "ran with token $IDEM_FENCING_TOKEN"`)
	}
	for _, p := range procs {
		if iv := p.wait(t); iv.code != 0 || iv.stdout != "ran with token 1\n" {
			t.Errorf("process: %v", iv)
		}
	}
	if c := lines(t, e["COUNTER"]); c != 1 {
		t.Fatalf("the command ran %d times across %d processes, want 1", c, n)
	}
	// A replay from yet another process.
	iv := runBin(t, e, "run", "-store", store, "-key", key, "--", "sh", "-c", `echo "$$" >> "$COUNTER"`)
	if iv.code != 0 || iv.stdout != "ran with token 1\n" || iv.stderr != "" {
		t.Errorf("replay: %v", iv)
	}
	if c := lines(t, e["COUNTER"]); c != 1 {
		t.Fatalf("the replay ran the command")
	}
}

func TestBinaryConcurrentFileStore(t *testing.T) {
	concurrentOnce(t, "file:"+filepath.Join(t.TempDir(), "records"), 8)
}

// TestBinaryReplayFailure records a failure under -on-failure lock and
// replays its output and status from another process; under unlock the
// next process runs the command again.
func TestBinaryReplayFailure(t *testing.T) {
	dir := t.TempDir()
	store := "file:" + filepath.Join(dir, "records")
	e := env{"COUNTER": filepath.Join(dir, "counter")}
	cmd := []string{"--", "sh", "-c", `echo run >> "$COUNTER"; echo "partial output"; echo "to stderr" >&2; exit 7`}
	iv := runBin(t, e, append([]string{"run", "-store", store, "-on-failure", "lock", "-key", "locked"}, cmd...)...)
	if iv.code != 7 || iv.stdout != "partial output\n" || iv.stderr != "to stderr\n" {
		t.Fatalf("first run: %v", iv)
	}
	iv = runBin(t, e, append([]string{"run", "-store", store, "-key", "locked"}, cmd...)...)
	if iv.code != 7 || iv.stdout != "partial output\n" || iv.stderr != "" {
		t.Fatalf("replay: %v", iv)
	}
	for range 2 {
		if iv := runBin(t, e, append([]string{"run", "-store", store, "-key", "unlocked"}, cmd...)...); iv.code != 7 {
			t.Fatalf("unlocked run: %v", iv)
		}
	}
	if c := lines(t, e["COUNTER"]); c != 3 {
		t.Fatalf("the command ran %d times, want 3 (1 locked, 2 unlocked)", c)
	}
}

// alive reports whether pid is a live process (not a zombie).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return !os.IsNotExist(err) && runtime.GOOS != "linux"
	}
	// pid (comm) state ...
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	waitForFile(t, path)
	for range 100 {
		b, _ := os.ReadFile(path)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			return pid
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no pid in %s", path)
	return 0
}

// TestBinaryTakeoverAfterKill kills a running idem with SIGKILL: its
// command dies with it (Linux), the claim stays in progress until its
// heartbeat is stale, and then another process takes it over and runs the
// command with the next fencing token.
func TestBinaryTakeoverAfterKill(t *testing.T) {
	dir := t.TempDir()
	store := "file:" + filepath.Join(dir, "records")
	e := env{"TOKENS": filepath.Join(dir, "tokens"), "PIDFILE": filepath.Join(dir, "pid")}
	cmd := []string{"--", "sh", "-c", `echo "$IDEM_FENCING_TOKEN" >> "$TOKENS"; if [ "$IDEM_FENCING_TOKEN" = 1 ]; then echo $$ > "$PIDFILE"; exec sleep 60; fi; echo "token $IDEM_FENCING_TOKEN"`}
	flags := []string{"run", "-store", store, "-takeover-after", "1500ms", "-heartbeat", "100ms", "-key", "k"}

	victim := startBin(t, e, append(flags, cmd...)...)
	pid := readPid(t, e["PIDFILE"])
	if err := victim.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if runtime.GOOS == "linux" {
		deadline := time.Now().Add(10 * time.Second)
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if alive(pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
			t.Errorf("the command (pid %d) outlived its killed idem", pid)
		}
	}
	_ = victim.cmd.Wait()

	iv := runBin(t, e, "inspect", "-store", store, "-key", "k")
	var r record
	if err := json.Unmarshal([]byte(iv.stdout), &r); err != nil || r.Status != storekit.StatusInProgress || r.Attempt != 1 {
		t.Fatalf("inspect after the kill: %v", iv)
	}

	start := time.Now()
	iv = runBin(t, e, append([]string{"run", "-store", store, "-on-duplicate", "wait", "-takeover-after", "1500ms", "-key", "k"}, cmd[0:]...)...)
	if iv.code != 0 || iv.stdout != "token 2\n" {
		t.Fatalf("takeover run: %v", iv)
	}
	if waited := time.Since(start); waited > 30*time.Second {
		t.Errorf("the takeover took %v", waited)
	}
	b, _ := os.ReadFile(e["TOKENS"])
	if string(b) != "1\n2\n" {
		t.Errorf("fencing tokens %q, want 1 then 2", b)
	}
	// And the taken-over outcome is what replays get.
	if iv := runBin(t, e, append(flags, cmd...)...); iv.code != 0 || iv.stdout != "token 2\n" {
		t.Errorf("replay after the takeover: %v", iv)
	}
}

// TestBinarySignal sends SIGTERM to a running idem: it stops its command,
// exits with the command's status, and (under unlock) releases the key.
func TestBinarySignal(t *testing.T) {
	dir := t.TempDir()
	store := "file:" + filepath.Join(dir, "records")
	e := env{"PIDFILE": filepath.Join(dir, "pid"), "COUNTER": filepath.Join(dir, "counter")}
	p := startBin(t, e, "run", "-store", store, "-key", "k", "--", "sh", "-c", `echo run >> "$COUNTER"; echo $$ > "$PIDFILE"; exec sleep 60`)
	readPid(t, e["PIDFILE"])
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if iv := p.wait(t); iv.code != 128+int(syscall.SIGTERM) {
		t.Fatalf("interrupted run: %v", iv)
	}
	if iv := runBin(t, e, "run", "-store", store, "-key", "k", "--", "sh", "-c", `echo run >> "$COUNTER"; echo second`); iv.code != 0 || iv.stdout != "second\n" {
		t.Fatalf("run after the interrupted one: %v", iv)
	}
	if c := lines(t, e["COUNTER"]); c != 2 {
		t.Fatalf("the command ran %d times, want 2", c)
	}
}

func TestBinaryRedis(t *testing.T) {
	addr := testenv.RedisAddr(t)
	store := "redis://" + addr + "/0?prefix=idem-cli-test:"
	dir := t.TempDir()
	e := env{"COUNTER": filepath.Join(dir, "counter")}
	key := randomKey(t)
	cmd := []string{"--", "sh", "-c", `echo run >> "$COUNTER"; echo "token $IDEM_FENCING_TOKEN"; exit 3`}
	for i := range 2 {
		iv := runBin(t, e, append([]string{"run", "-store", store, "-on-failure", "lock", "-key", key}, cmd...)...)
		if iv.code != 3 || iv.stdout != "token 1\n" {
			t.Fatalf("run %d: %v", i, iv)
		}
	}
	if c := lines(t, e["COUNTER"]); c != 1 {
		t.Fatalf("the command ran %d times on Redis, want 1", c)
	}
	iv := runBin(t, e, "inspect", "-store", store, "-key", key)
	if iv.code != 0 || !strings.Contains(iv.stdout, `"exit_code": 3`) {
		t.Errorf("inspect: %v", iv)
	}
	if iv := runBin(t, e, "unlock", "-store", store, "-key", key, "-force"); iv.code != 0 {
		t.Errorf("unlock -force: %v", iv)
	}
	if iv := runBin(t, e, "inspect", "-store", store, "-key", key); iv.code != exitNoRecord {
		t.Errorf("inspect after unlock: %v", iv)
	}
	t.Run("concurrent", func(t *testing.T) { concurrentOnce(t, store, 6) })
}

func TestBinaryDynamoDB(t *testing.T) {
	endpoint := testenv.DynamoDBEndpoint(t)
	store := "dynamodb://idem_cli_test?create=1&endpoint=" + endpoint
	dir := t.TempDir()
	e := env{
		"COUNTER":           filepath.Join(dir, "counter"),
		"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test", "AWS_REGION": "us-east-1",
		"AWS_EC2_METADATA_DISABLED": "true",
	}
	key := randomKey(t)
	for i := range 2 {
		iv := runBin(t, e, "run", "-store", store, "-key", key, "--", "sh", "-c", `echo run >> "$COUNTER"; echo hello`)
		if iv.code != 0 || iv.stdout != "hello\n" {
			t.Fatalf("run %d: %v", i, iv)
		}
	}
	if c := lines(t, e["COUNTER"]); c != 1 {
		t.Fatalf("the command ran %d times on DynamoDB, want 1", c)
	}
	// The default output limit fits in a DynamoDB item.
	big := randomKey(t)
	if iv := runBin(t, e, "run", "-store", store, "-key", big, "--", "head", "-c", "300000", "/dev/zero"); iv.code != 0 || len(iv.stdout) != 300000 {
		t.Fatalf("run with 300000 bytes of output: exit %d, %d bytes, stderr %q", iv.code, len(iv.stdout), iv.stderr)
	}
	var r record
	iv := runBin(t, e, "inspect", "-store", store, "-key", big)
	if err := json.Unmarshal([]byte(iv.stdout), &r); err != nil || r.StdoutBytes == nil || *r.StdoutBytes != dynamoMaxOutput || !*r.Truncated {
		t.Fatalf("inspect: %v", iv)
	}
	if iv := runBin(t, e, "purge", "-store", store); iv.code != 0 || !strings.Contains(iv.stdout, "DynamoDB") {
		t.Errorf("purge: %v", iv)
	}
}

func TestBinaryRedisCluster(t *testing.T) {
	addrs := testenv.RedisClusterAddrs(t)
	store := "redis-cluster://" + addrs[0] + "?prefix=idem-cli-test:"
	for _, a := range addrs[1:] {
		store += "&addr=" + a
	}
	concurrentOnce(t, store, 4)
}

// TestBinaryDefaultStore runs without -store or IDEM_STORE: records go to
// a file store in the user cache directory.
func TestBinaryDefaultStore(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the cache directory is $XDG_CACHE_HOME only on Linux")
	}
	cache := t.TempDir()
	e := env{"XDG_CACHE_HOME": cache, "IDEM_STORE": ""}
	for range 2 {
		if iv := runBin(t, e, "run", "-key", "k", "--", "sh", "-c", `echo "$IDEM_FENCING_TOKEN $$"`); iv.code != 0 || !strings.HasPrefix(iv.stdout, "1 ") {
			t.Fatalf("run: %v", iv)
		}
	}
	// The file store keeps records in fan-out directories below its own.
	var records int
	err := filepath.WalkDir(filepath.Join(cache, "idem", "records"), func(_ string, de fs.DirEntry, err error) error {
		if err == nil && !de.IsDir() && strings.HasPrefix(de.Name(), storekit.StorageKeyPrefix) {
			records++
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if records != 1 {
		t.Errorf("%d records in the default store, want 1", records)
	}
	if iv := runBin(t, e, "-h"); iv.code != 0 || !strings.Contains(iv.stdout, "idem run") {
		t.Errorf("idem -h: %v", iv)
	}
}
