//go:build unix

package storetest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/storekit"
)

// DeadOwnerConfig configures the DeadOwner suite of the Harness.
type DeadOwnerConfig struct {
	// NewStore opens the store under test. It is called once in the test
	// process, before any child starts, and once in every child, with
	// the same namespace.
	NewStore func(namespace string) (storekit.Store, error)
	// Namespace is handed to NewStore in every process. Default: a
	// fresh random string.
	Namespace string
	// Env is extra environment for the children.
	Env []string
	// Presence declares that the store knows at once when the process
	// holding a claim is gone (it implements storekit.Presence): the
	// Killed case runs. Unset, only Restarted runs.
	Presence bool
}

const (
	deadRoleEnv = "IDEM_STORETEST_DEAD_ROLE" // hold or take
	deadKeyEnv  = "IDEM_STORETEST_DEAD_KEY"
	deadInstEnv = "IDEM_STORETEST_DEAD_INSTANCE"
	deadGoEnv   = "IDEM_STORETEST_DEAD_GO" // finish: fn returns once this file exists
)

// deadWithin bounds how long a dead owner's claim may stay in the way. The
// takeover threshold of every Guard in the suite is the default, 30s: a
// claim taken over within deadWithin was taken because its owner was known
// gone, not because it went stale.
const deadWithin = 10 * time.Second

// runDeadOwner proves DESIGN rule 10b with real OS processes, every Guard
// on the default 30s takeover threshold:
//
//   - Killed (Presence): a child process holds a claim. While it runs, and
//     while it is stopped (SIGSTOP) and after it is resumed, a call of the
//     key is refused as in progress and fn does not run. Once the child is
//     SIGKILLed, a waiting duplicate (OnDuplicate(Wait)) wakes and runs fn
//     well within the threshold, with fencing token 2, and a retrying
//     caller then gets its result.
//   - Paused: a child holds a claim and is stopped (SIGSTOP) for 2s, a
//     call of the key meanwhile is refused, and once resumed (SIGCONT) the
//     child's fn returns: its outcome is the key's, and fn ran once.
//   - Restarted: a child started with WithInstanceID(id) holds a claim and
//     is stopped (SIGSTOP: a process whose death the store cannot see, or
//     has not seen yet); a child with another id is refused; a child with
//     the same id (the restarted process) takes the claim over at once and
//     runs fn with fencing token 2.
//
// It is for Unix (signals); on other systems it skips.
func runDeadOwner(t *testing.T, cfg DeadOwnerConfig) {
	t.Helper()
	if os.Getenv(deadRoleEnv) != "" && os.Getenv(procTestEnv) == t.Name() {
		os.Exit(deadChild(cfg))
	}
	if cfg.Namespace == "" {
		cfg.Namespace = "dead" + strconv.FormatUint(rand.Uint64(), 36)
	}
	store, err := cfg.NewStore(cfg.Namespace)
	if err != nil {
		t.Fatalf("NewStore: %v", err)
	}
	t.Run("Killed", func(t *testing.T) {
		if !cfg.Presence {
			t.Skip("DeadOwnerConfig.Presence unset: the store keeps the takeover threshold for a dead process")
		}
		if _, ok := store.(storekit.Presence); !ok {
			t.Fatalf("DeadOwnerConfig.Presence is set, but %T does not implement storekit.Presence", store)
		}
		deadKilled(t, cfg, store)
	})
	t.Run("Paused", func(t *testing.T) { deadPaused(t, cfg, store) })
	t.Run("Restarted", func(t *testing.T) { deadRestarted(t, cfg) })
}

// deadProc is one child of the suite, its output read line by line.
type deadProc struct {
	cmd   *exec.Cmd
	lines chan string
	done  chan struct{}
	err   error
}

func startDead(t *testing.T, cfg DeadOwnerConfig, role, key, instance string, env ...string) *deadProc {
	t.Helper()
	parts := strings.Split(parentName(t), "/")
	for i, s := range parts {
		parts[i] = "^" + regexp.QuoteMeta(s) + "$"
	}
	cmd := exec.Command(os.Args[0], "-test.run="+strings.Join(parts, "/"), "-test.count=1")
	cmd.Env = append(append(os.Environ(), cfg.Env...), deadRoleEnv+"="+role, procTestEnv+"="+parentName(t),
		procNSEnv+"="+cfg.Namespace, deadKeyEnv+"="+key, deadInstEnv+"="+instance)
	cmd.Env = append(cmd.Env, env...)
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &deadProc{cmd: cmd, lines: make(chan string, 64), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
		close(p.lines)
	}()
	go func() {
		p.err = cmd.Wait()
		_ = pw.Close()
		close(p.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-p.done
	})
	return p
}

// expect returns the first line of p that starts with prefix; it fails t
// when p ends or a minute passes first.
func (p *deadProc) expect(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(time.Minute)
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				t.Fatalf("the child exited (%v) before it printed %q", p.err, prefix)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-timeout:
			t.Fatalf("the child printed no %q within a minute", prefix)
		}
	}
}

func (p *deadProc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

func deadKilled(t *testing.T, cfg DeadOwnerConfig, store storekit.Store) {
	key := "dead-killed-" + strconv.FormatUint(rand.Uint64(), 36)
	owner := startDead(t, cfg, "hold", key, "")
	if got := owner.expect(t, "claimed"); got != "claimed 1" {
		t.Fatalf("the owner printed %q, want %q", got, "claimed 1")
	}
	ret, err := idem.New[string](store)
	if err != nil {
		t.Fatal(err)
	}
	var runs []int64
	fn := func(ctx context.Context) (string, error) {
		tok, _ := idem.FencingToken(ctx)
		runs = append(runs, tok)
		return "taker", nil
	}
	refused := func(when string) {
		t.Helper()
		if _, err := ret.Do(context.Background(), key, fn); !errors.Is(err, idem.ErrInProgress) {
			t.Fatalf("%s: Do = %v, want ErrInProgress: a live owner is never taken over before the threshold", when, err)
		}
	}
	refused("the owner running")
	if err := owner.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	refused("the owner stopped (SIGSTOP) for 2s")
	if err := owner.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	refused("the owner resumed")

	var goneTakeovers atomic.Int32
	wait, err := idem.New[string](store, idem.OnDuplicate(idem.Wait), idem.WithObserver(func(_ context.Context, e idem.Event) {
		if e.Kind == idem.EventTakeover && e.OwnerGone {
			goneTakeovers.Add(1)
		}
	}))
	if err != nil {
		t.Fatal(err)
	}
	type outcome struct {
		v   string
		err error
		at  time.Time
	}
	waited := make(chan outcome, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		v, err := wait.Do(ctx, key, fn)
		waited <- outcome{v, err, time.Now()}
	}()
	time.Sleep(500 * time.Millisecond) // the waiter is waiting
	owner.kill(t)
	killed := time.Now()
	w := <-waited
	if w.err != nil || w.v != "taker" {
		t.Fatalf("the waiting duplicate: %q, %v; want it to run fn once the owner died", w.v, w.err)
	}
	if d := w.at.Sub(killed); d > deadWithin {
		t.Fatalf("the waiter ran fn %v after the owner was killed: it waited for the threshold, not for the owner's death", d)
	} else {
		t.Logf("a waiting duplicate ran fn %v after the owner was SIGKILLed (takeover threshold 30s)", d)
	}
	if v, err := ret.Do(context.Background(), key, fn); err != nil || v != "taker" {
		t.Fatalf("a retry after the takeover: %q, %v; want the replay of %q", v, err, "taker")
	}
	if len(runs) != 1 || runs[0] != 2 {
		t.Fatalf("fn ran with fencing tokens %v; want once, with 2", runs)
	}
	if n := goneTakeovers.Load(); n != 1 {
		t.Fatalf("the waiter's Observer saw %d takeovers with Event.OwnerGone; want 1", n)
	}
}

func deadRestarted(t *testing.T, cfg DeadOwnerConfig) {
	key := "dead-restarted-" + strconv.FormatUint(rand.Uint64(), 36)
	id := "i-" + strconv.FormatUint(rand.Uint64(), 36)
	first := startDead(t, cfg, "hold", key, id)
	if got := first.expect(t, "claimed"); got != "claimed 1" {
		t.Fatalf("the first incarnation printed %q, want %q", got, "claimed 1")
	}
	// Stopped, not killed: its presence, where the store has one, still
	// says alive, so only the instance ID can free the claim.
	if err := first.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer first.kill(t)
	other := startDead(t, cfg, "take", key, id+"-other")
	if got := other.expect(t, "RESULT"); !strings.Contains(got, "in progress") {
		t.Fatalf("a process with another instance ID: %q; want it refused as in progress", got)
	}
	start := time.Now()
	again := startDead(t, cfg, "take", key, id)
	if got := again.expect(t, "RESULT"); got != "RESULT taker 2" {
		t.Fatalf("the restarted process (same instance ID): %q; want it to take the claim over and run fn with fencing token 2", got)
	}
	t.Logf("the restarted process took its earlier incarnation's claim over and ran fn %v after it started (takeover threshold 30s)", time.Since(start))
}

func deadPaused(t *testing.T, cfg DeadOwnerConfig, store storekit.Store) {
	key := "dead-paused-" + strconv.FormatUint(rand.Uint64(), 36)
	goFile := t.TempDir() + "/go"
	owner := startDead(t, cfg, "finish", key, "", deadGoEnv+"="+goFile)
	if got := owner.expect(t, "claimed"); got != "claimed 1" {
		t.Fatalf("the owner printed %q, want %q", got, "claimed 1")
	}
	g, err := idem.New[string](store)
	if err != nil {
		t.Fatal(err)
	}
	ran := 0
	fn := func(context.Context) (string, error) { ran++; return "taker", nil }
	if err := owner.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	if _, err := g.Do(context.Background(), key, fn); !errors.Is(err, idem.ErrInProgress) {
		t.Fatalf("the owner stopped (SIGSTOP) for 2s: Do = %v, want ErrInProgress", err)
	}
	if err := owner.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(goFile, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if got := owner.expect(t, "RESULT"); got != "RESULT owner 1" {
		t.Fatalf("the resumed owner: %q; want it to complete with its own claim", got)
	}
	if v, err := g.Do(context.Background(), key, fn); err != nil || v != "owner 1" || ran != 0 {
		t.Fatalf("after the owner completed: %q, %v, fn ran %d times here; want the owner's result and no run", v, err, ran)
	}
}

// deadChild is the work of one child of runDeadOwner.
func deadChild(cfg DeadOwnerConfig) int {
	store, err := cfg.NewStore(os.Getenv(procNSEnv))
	if err != nil {
		fmt.Println("NewStore:", err)
		return 2
	}
	var opts []idem.Option
	if id := os.Getenv(deadInstEnv); id != "" {
		opts = append(opts, idem.WithInstanceID(id))
	}
	g, err := idem.New[string](store, opts...)
	if err != nil {
		fmt.Println("idem.New:", err)
		return 2
	}
	role := os.Getenv(deadRoleEnv)
	v, err := g.Do(context.Background(), os.Getenv(deadKeyEnv), func(ctx context.Context) (string, error) {
		tok, _ := idem.FencingToken(ctx)
		switch role {
		case "hold":
			fmt.Printf("claimed %d\n", tok)
			select {} // killed here
		case "finish":
			fmt.Printf("claimed %d\n", tok)
			for {
				if _, err := os.Stat(os.Getenv(deadGoEnv)); err == nil {
					return fmt.Sprintf("owner %d", tok), nil
				}
				time.Sleep(20 * time.Millisecond)
			}
		}
		return fmt.Sprintf("taker %d", tok), nil
	})
	if err != nil {
		fmt.Printf("RESULT ERROR %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
	} else {
		fmt.Printf("RESULT %s\n", v)
	}
	return 0
}
