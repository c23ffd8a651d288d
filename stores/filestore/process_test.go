//go:build unix

package filestore_test

// Tests in this file re-execute the test binary as child processes. TestMain
// sees IDEM_FILESTORE_CHILD and runs the child role named there instead of
// the tests; children talk to the parent in lines on stdout.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/gofrs/flock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/filestore"
)

const childEnv = "IDEM_FILESTORE_CHILD"

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		os.Exit(runChild(role))
	}
	os.Exit(m.Run())
}

// childOut serialises the lines a child prints.
type childOut struct {
	mu sync.Mutex
	w  *bufio.Writer
}

func (o *childOut) printf(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Fprintf(o.w, format+"\n", args...)
	_ = o.w.Flush()
}

func runChild(role string) int {
	out := &childOut{w: bufio.NewWriter(os.Stdout)}
	var err error
	switch role {
	case "claim":
		err = childClaim(out)
	case "guard-hold":
		err = childGuardHold(out)
	default:
		err = fmt.Errorf("unknown child role %q", role)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

func envInt(name string) int {
	n, err := strconv.Atoi(os.Getenv(name))
	if err != nil {
		panic(fmt.Sprintf("%s: %v", name, err))
	}
	return n
}

// waitGo tells the parent the child is ready and blocks until the parent
// closes the child's stdin, so that all children start together.
func waitGo(out *childOut) {
	out.printf("ready")
	_, _ = io.Copy(io.Discard, os.Stdin)
}

// child is a running child process as the parent sees it.
type child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string
	stderr *strings.Builder
	done   chan struct{}
	err    error
}

func startChild(t *testing.T, role string, env ...string) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$")
	cmd.Env = append(append(os.Environ(), childEnv+"="+role), env...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	c := &child{cmd: cmd, stdin: stdin, lines: make(chan string, 1<<16), stderr: &strings.Builder{}, done: make(chan struct{})}
	cmd.Stderr = &lockedWriter{b: c.stderr}
	require.NoError(t, cmd.Start())
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		c.err = cmd.Wait()
		close(c.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-c.done
	})
	return c
}

type lockedWriter struct {
	mu sync.Mutex
	b  *strings.Builder
}

func (w *lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *lockedWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func (c *child) stderrText() string { return c.cmd.Stderr.(*lockedWriter).String() }

// expect waits for the next line and checks that it starts with prefix.
func (c *child) expect(t *testing.T, prefix string, timeout time.Duration) string {
	t.Helper()
	select {
	case l, ok := <-c.lines:
		require.True(t, ok, "child exited before %q; stderr:\n%s", prefix, c.stderrText())
		require.True(t, strings.HasPrefix(l, prefix), "got %q, want %q...", l, prefix)
		return l
	case <-time.After(timeout):
		t.Fatalf("no %q from child within %v; stderr:\n%s", prefix, timeout, c.stderrText())
		return ""
	}
}

// rest collects the remaining lines and waits for a clean exit.
func (c *child) rest(t *testing.T, timeout time.Duration) []string {
	t.Helper()
	var out []string
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-c.lines:
			if !ok {
				<-c.done
				require.NoError(t, c.err, "child failed; stderr:\n%s", c.stderrText())
				return out
			}
			out = append(out, l)
		case <-deadline:
			t.Fatalf("child did not finish within %v; stderr:\n%s", timeout, c.stderrText())
		}
	}
}

// startAll starts n children and lets them go at once.
func startAll(t *testing.T, n int, role string, env ...string) []*child {
	t.Helper()
	children := make([]*child, n)
	for i := range children {
		children[i] = startChild(t, role, env...)
	}
	for _, c := range children {
		c.expect(t, "ready", 60*time.Second)
	}
	for _, c := range children {
		require.NoError(t, c.stdin.Close())
	}
	return children
}

const (
	procs      = 4
	goroutines = 16
)

// childClaim: goroutines claim every key once through the store and print
// the keys they won.
func childClaim(out *childOut) error {
	s, err := filestore.New(os.Getenv("IDEM_FS_DIR"))
	if err != nil {
		return err
	}
	keys, workers := envInt("IDEM_FS_KEYS"), envInt("IDEM_FS_GOROUTINES")
	waitGo(out)
	ctx := context.Background()
	errs := make(chan error, workers)
	var wg sync.WaitGroup
	for g := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range keys {
				nonce := fmt.Sprintf("%d-%d-%d", os.Getpid(), g, i)
				res, err := s.Claim(ctx, storekit.ClaimRequest{Key: key(i), Nonce: nonce, LeaseTTL: time.Hour, TakeoverAfter: time.Hour})
				if err != nil {
					errs <- err
					return
				}
				if res.Outcome != storekit.Existing {
					out.printf("win %s %s %s", key(i), nonce, res.Outcome)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// TestMultiProcessClaim: 4 processes x 16 goroutines claim the same keys in
// one directory; every key is claimed exactly once in total, and the record
// holds the winner's nonce.
func TestMultiProcessClaim(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := filepath.Join(t.TempDir(), "store")
	const keys = 200
	children := startAll(t, procs, "claim",
		"IDEM_FS_DIR="+dir, "IDEM_FS_KEYS="+strconv.Itoa(keys), "IDEM_FS_GOROUTINES="+strconv.Itoa(goroutines))
	winners := map[string][]string{}
	for _, c := range children {
		for _, l := range c.rest(t, 90*time.Second) {
			f := strings.Fields(l)
			require.Len(t, f, 4, l)
			require.Equal(t, "win", f[0], l)
			require.Equal(t, "claimed", f[3], l)
			winners[f[1]] = append(winners[f[1]], f[2])
		}
	}
	s, err := filestore.New(dir)
	require.NoError(t, err)
	for i := range keys {
		k := key(i)
		require.Len(t, winners[k], 1, "key %s claimed by %v", k, winners[k])
		rec, err := s.Get(context.Background(), k)
		require.NoError(t, err)
		assert.Equal(t, winners[k][0], rec.Nonce)
		assert.EqualValues(t, 1, rec.Attempt)
	}
}

// Guard settings shared by the parent and its children.
const (
	gTakeover  = 300 * time.Millisecond
	gHeartbeat = 100 * time.Millisecond
)

func newGuard(t testing.TB, s storekit.Store, opts ...idem.Option) *idem.Guard[string] {
	g, err := idem.New[string](s, append([]idem.Option{
		idem.WithTakeoverAfter(gTakeover), idem.WithHeartbeat(gHeartbeat), idem.WithTTL(time.Hour),
	}, opts...)...)
	if err != nil {
		if t != nil {
			t.Fatal(err)
		}
		panic(err)
	}
	return g
}

// childGuardHold: one g.Do whose fn prints its fencing token and then holds
// the claim until IDEM_FS_HOLD has passed (or its context ends). Prints the
// outcome of Do.
func childGuardHold(out *childOut) error {
	s, err := filestore.New(os.Getenv("IDEM_FS_DIR"))
	if err != nil {
		return err
	}
	hold, err := time.ParseDuration(os.Getenv("IDEM_FS_HOLD"))
	if err != nil {
		return err
	}
	g := newGuard(nil, s)
	v, err := g.Do(context.Background(), os.Getenv("IDEM_FS_KEY"), func(ctx context.Context) (string, error) {
		tok, _ := idem.FencingToken(ctx)
		out.printf("claimed %d", tok)
		select {
		case <-time.After(hold):
			out.printf("fn held %v", hold)
		case <-ctx.Done():
			out.printf("fn cancelled lost=%t", errors.Is(context.Cause(ctx), storekit.ErrLostOwnership))
		}
		return "child", nil
	})
	out.printf("done lost=%t value=%q err=%v", errors.Is(err, storekit.ErrLostOwnership), v, err)
	return nil
}

// takeOverAndComplete runs the parent's call on key, which must wait for the
// child's claim to go stale, take it over as attempt 2 and complete.
func takeOverAndComplete(t *testing.T, s *filestore.Store, k string) {
	t.Helper()
	g := newGuard(t, s, idem.OnDuplicate(idem.Wait))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	var token int64
	v, err := g.Do(ctx, k, func(ctx context.Context) (string, error) {
		token, _ = idem.FencingToken(ctx)
		return "parent", nil
	})
	require.NoError(t, err)
	assert.Equal(t, "parent", v)
	assert.EqualValues(t, 2, token, "the takeover runs fn with fencing token 2")
	t.Logf("took over after %v", time.Since(start))

	sk, err := guardinfo.StorageKey(g, k)
	require.NoError(t, err)
	rec, err := s.Get(ctx, sk)
	require.NoError(t, err)
	assert.Equal(t, storekit.StatusCompleted, rec.Status)
	assert.Equal(t, `"parent"`, string(rec.Result))
	assert.EqualValues(t, 2, rec.Attempt)
}

// TestGuardCrashTakeover: a child claims a key and is killed with SIGKILL
// inside fn; the parent's call takes the claim over once it is stale, runs
// fn with fencing token 2 and completes.
func TestGuardCrashTakeover(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := filepath.Join(t.TempDir(), "store")
	s, err := filestore.New(dir)
	require.NoError(t, err)
	const k = "crash-key"
	c := startChild(t, "guard-hold", "IDEM_FS_DIR="+dir, "IDEM_FS_KEY="+k, "IDEM_FS_HOLD=1h")
	require.Equal(t, "claimed 1", c.expect(t, "claimed", 60*time.Second))
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGKILL))
	<-c.done

	takeOverAndComplete(t, s, k)
}

// TestGuardStaleOwner: a child is stopped with SIGSTOP inside fn, after
// claiming, for longer than the takeover threshold. The parent takes over
// and completes; once continued, the child's Do fails with ErrLostOwnership
// and the stored result stays the parent's.
func TestGuardStaleOwner(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	dir := filepath.Join(t.TempDir(), "store")
	s, err := filestore.New(dir)
	require.NoError(t, err)
	const k = "stale-key"
	c := startChild(t, "guard-hold", "IDEM_FS_DIR="+dir, "IDEM_FS_KEY="+k, "IDEM_FS_HOLD=5s")
	require.Equal(t, "claimed 1", c.expect(t, "claimed", 60*time.Second))
	sk, err := guardinfo.StorageKey(newGuard(t, s), k)
	require.NoError(t, err)
	stopOutsideLock(t, c, filestore.StripePath(s, sk))

	takeOverAndComplete(t, s, k)
	require.NoError(t, c.cmd.Process.Signal(syscall.SIGCONT))

	lines := c.rest(t, 30*time.Second)
	require.NotEmpty(t, lines)
	assert.Equal(t, "fn cancelled lost=true", lines[0], "a heartbeat noticed the takeover and cancelled fn's context with ErrLostOwnership")
	last := lines[len(lines)-1]
	assert.True(t, strings.HasPrefix(last, "done lost=true "), "the stale owner's Do returns ErrLostOwnership: %s", last)

	rec, err := s.Get(context.Background(), sk)
	require.NoError(t, err)
	assert.Equal(t, `"parent"`, string(rec.Result), "the stale owner overwrote nothing")
	assert.EqualValues(t, 2, rec.Attempt)
}

// stopOutsideLock stops the child with SIGSTOP at a moment it does not hold
// the lock file guarding the key (a process stopped while holding a lock
// blocks every writer of that stripe until it continues; see the package
// doc), retrying a few times.
func stopOutsideLock(t *testing.T, c *child, lockPath string) {
	t.Helper()
	probe := flock.New(lockPath)
	for range 50 {
		require.NoError(t, c.cmd.Process.Signal(syscall.SIGSTOP))
		testenv.WaitStopped(t, c.cmd.Process.Pid)
		ok, err := probe.TryLock()
		require.NoError(t, err)
		if ok {
			require.NoError(t, probe.Unlock())
			return
		}
		require.NoError(t, c.cmd.Process.Signal(syscall.SIGCONT))
		time.Sleep(time.Millisecond)
	}
	t.Fatal("could not stop the child outside its lock")
}
