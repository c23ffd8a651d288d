package testenv

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// ChildConfig configures StartChild.
type ChildConfig struct {
	// Run is the -test.run pattern of the child: the test function that
	// does the child's work when Env tells it to. Default "^$": no test
	// runs, and the package's TestMain does the work.
	Run string
	// Env is the child's environment on top of the test's own: what tells
	// it that it is a child, and what to do.
	Env []string
	// OnLine, if set, sees every line the child prints, in order, before
	// Expect does; a line it returns true for is consumed (Expect never
	// sees it). It runs on the goroutine that reads the child's output.
	OnLine func(line string) bool
	// Grace is how long the child has, when the test ends and its stdin is
	// closed, to exit on its own; the test fails if it does not (it is
	// then killed) or if it exits with an error other than a SIGKILL sent
	// by Kill. Zero: the child is killed when the test ends, whatever it is
	// doing, and how it exits is not checked.
	Grace time.Duration
}

// Child is the test binary re-executed as a child process that talks with
// the test a line at a time: the test writes lines to its stdin (Send) and
// reads the lines it prints on stdout (Expect); its stderr is the test's.
// The child's side is its own code: a TestMain or a test function that
// finds its instructions in the environment (ChildConfig.Env), prints
// lines with fmt.Println and reads os.Stdin with a bufio.Scanner; a child
// that serves until the test is done reads stdin to its end (the test
// closes it when it ends).
//
// The test can kill it (Kill) and, on Unix, pause and resume it (Stop,
// Continue). When the test ends, the child is resumed, its stdin closed,
// and it is waited for (ChildConfig.Grace) or killed.
type Child struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	killed atomic.Bool

	mu    sync.Mutex
	lines []string      // printed and not yet expected
	more  chan struct{} // closed (and replaced) when a line arrives or output ends
	eof   bool

	done chan struct{} // closed when the child has exited
	err  error         // its exit status, once done is closed
}

// StartChild starts the test binary as a child process with cfg. The
// child is ended when the test ends (see ChildConfig.Grace).
func StartChild(t testing.TB, cfg ChildConfig) *Child {
	t.Helper()
	run := cfg.Run
	if run == "" {
		run = "^$"
	}
	cmd := exec.Command(os.Args[0], "-test.run="+run, "-test.count=1")
	cmd.Env = append(os.Environ(), cfg.Env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &Child{cmd: cmd, stdin: stdin, more: make(chan struct{}), done: make(chan struct{})}
	go c.read(stdout, cfg.OnLine)
	t.Cleanup(func() { c.end(t, cfg.Grace) })
	return c
}

// read collects the child's lines until its output ends, then waits for
// it to exit.
func (c *Child) read(stdout io.Reader, onLine func(string) bool) {
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := sc.Text()
		if onLine != nil && onLine(line) {
			continue
		}
		c.mu.Lock()
		c.lines = append(c.lines, line)
		c.signal()
		c.mu.Unlock()
	}
	_, _ = io.Copy(io.Discard, stdout) // after a line too long to scan
	c.mu.Lock()
	c.eof = true
	c.signal()
	c.mu.Unlock()
	c.err = c.cmd.Wait()
	close(c.done)
}

// signal wakes Expect; c.mu is held.
func (c *Child) signal() {
	close(c.more)
	c.more = make(chan struct{})
}

// end is the Child's cleanup.
func (c *Child) end(t testing.TB, grace time.Duration) {
	_ = c.stdin.Close()
	resume(c.cmd.Process)
	if grace <= 0 {
		c.kill()
		<-c.done
		return
	}
	select {
	case <-c.done:
		if c.err != nil && !c.killed.Load() {
			t.Errorf("child %d: %v", c.Pid(), c.err)
		}
	case <-time.After(grace):
		c.kill()
		<-c.done
		t.Errorf("child %d did not exit within %v of its stdin closing", c.Pid(), grace)
	}
}

func (c *Child) kill() {
	c.killed.Store(true)
	_ = c.cmd.Process.Kill()
}

// Pid is the child's process id.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Expect waits for a line that starts with prefix and returns the rest of
// it, trimmed of spaces. Lines before it are logged and dropped. It fails
// the test if the child's output ends first, or if timeout passes (a bound
// against a hung child, not a measurement).
func (c *Child) Expect(t testing.TB, prefix string, timeout time.Duration) string {
	t.Helper()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	for {
		c.mu.Lock()
		for len(c.lines) > 0 {
			line := c.lines[0]
			c.lines = c.lines[1:]
			if rest, ok := strings.CutPrefix(line, prefix); ok {
				c.mu.Unlock()
				return strings.TrimSpace(rest)
			}
			t.Logf("child %d: %s", c.Pid(), line)
		}
		eof, more := c.eof, c.more
		c.mu.Unlock()
		if eof {
			<-c.done
			t.Fatalf("child %d exited (%v) before it printed %q", c.Pid(), c.err, prefix)
		}
		select {
		case <-more:
		case <-deadline.C:
			t.Fatalf("child %d did not print %q within %v", c.Pid(), prefix, timeout)
		}
	}
}

// Send writes line, and a newline, to the child's stdin.
func (c *Child) Send(t testing.TB, line string) {
	t.Helper()
	if _, err := io.WriteString(c.stdin, line+"\n"); err != nil {
		t.Fatalf("child %d: %v", c.Pid(), err)
	}
}

// Kill kills the child (SIGKILL) and waits until it has exited. The
// cleanup does not count its exit as a failure.
func (c *Child) Kill(t testing.TB) {
	t.Helper()
	c.kill()
	<-c.done
}

// Done is closed when the child has exited (Err then says how).
func (c *Child) Done() <-chan struct{} { return c.done }

// Err is how the child exited (nil: status 0), once Done is closed.
func (c *Child) Err() error {
	<-c.done
	return c.err
}
