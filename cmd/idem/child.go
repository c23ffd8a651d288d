package main

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// outcome is what idem records for a run of a command: its exit status and
// the first bytes of its standard output. It is the Guard's result type,
// stored as JSON.
type outcome struct {
	V         int    `json:"v"`                // encoding version, 1
	Exit      int    `json:"exit"`             // exit status (128+n for signal n)
	Stdout    []byte `json:"stdout,omitempty"` // captured standard output
	StdoutLen int64  `json:"stdout_len"`       // bytes the command wrote to standard output
}

// outcomeVersion is the encoding version of outcome.
const outcomeVersion = 1

// truncated reports whether the command wrote more than was captured.
func (o outcome) truncated() bool { return o.StdoutLen > int64(len(o.Stdout)) }

// startError is a command that could not be started; it never ran.
type startError struct {
	code int // exitNotFound or exitCannotExec
	err  error
}

func (e *startError) Error() string { return e.err.Error() }
func (e *startError) Unwrap() error { return e.err }

// exitError is a command that exited with a non-zero status under
// -on-failure unlock: the Guard releases the claim.
type exitError struct{ code int }

func (e *exitError) Error() string { return "command exited with status " + strconv.Itoa(e.code) }

// capture keeps the first max bytes written to it and counts the rest.
type capture struct {
	max   int
	buf   []byte
	total int64
}

func (c *capture) Write(p []byte) (int, error) {
	c.total += int64(len(p))
	if room := c.max - len(c.buf); room > 0 {
		c.buf = append(c.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// tee writes to the capture and to out. A failing out (a closed pipe) is
// dropped after its first error, so the command's output is still captured
// and the command is not killed by SIGPIPE because idem's own output went
// away.
type tee struct {
	cap    *capture
	out    io.Writer
	outErr error
}

func (t *tee) Write(p []byte) (int, error) {
	t.cap.Write(p)
	if t.out != nil && t.outErr == nil {
		if _, err := t.out.Write(p); err != nil {
			t.outErr = err
		}
	}
	return len(p), nil
}

// execSpec says how to run a command.
type execSpec struct {
	args      []string
	env       []string
	stdin     io.Reader
	stdout    io.Writer
	stderr    io.Writer
	maxOutput int
	timeout   time.Duration // 0: none
	killGrace time.Duration
	// lapseGrace, when set, bounds killGrace when the command is stopped
	// because its claim could not be refreshed (ok, given the cause of
	// the run's context): SIGKILL must come before the claim can look
	// stale elsewhere.
	lapseGrace func(cause error) (grace time.Duration, ok bool)
}

// execute runs the command until it exits. When ctx ends (ownership lost,
// idem interrupted) or the timeout passes, the command's process group gets
// SIGTERM and, after the grace, SIGKILL. It returns the outcome, and a
// *startError when the command could not be started.
func execute(ctx context.Context, s execSpec) (outcome, error) {
	res := outcome{V: outcomeVersion}
	if err := ctx.Err(); err != nil {
		return res, &startError{code: exitSoftware, err: context.Cause(ctx)}
	}
	path, err := exec.LookPath(s.args[0])
	if err != nil {
		return res, startErr(s.args[0], err)
	}
	cmd := exec.Command(path, s.args[1:]...)
	cmd.Args[0] = s.args[0]
	cmd.Env = s.env
	cmd.Stdin = s.stdin
	c := &capture{max: s.maxOutput}
	t := &tee{cap: c, out: s.stdout}
	cmd.Stdout = t
	cmd.Stderr = s.stderr
	// After the command exits, wait at most this long for processes it left
	// behind that still hold its output open.
	cmd.WaitDelay = max(s.killGrace, time.Second)
	setProcAttr(cmd)
	if err := cmd.Start(); err != nil {
		return res, startErr(s.args[0], err)
	}

	runCtx := ctx
	if s.timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	var (
		mu     sync.Mutex
		exited bool
	)
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		select {
		case <-done:
			return
		case <-runCtx.Done():
		}
		signal := func(kill bool) {
			mu.Lock()
			defer mu.Unlock()
			if !exited {
				stopProcess(cmd, kill)
			}
		}
		grace := s.killGrace
		if s.lapseGrace != nil {
			if g, ok := s.lapseGrace(context.Cause(runCtx)); ok {
				grace = min(grace, g)
			}
		}
		signal(false)
		timer := time.NewTimer(grace)
		defer timer.Stop()
		select {
		case <-done:
		case <-timer.C:
			signal(true)
		}
	}()
	werr := cmd.Wait()
	mu.Lock()
	exited = true
	mu.Unlock()
	close(done)
	<-stopped

	res.Stdout, res.StdoutLen = c.buf, c.total
	res.Exit = exitStatus(cmd, werr)
	return res, nil
}

func startErr(name string, err error) error {
	code := exitCannotExec
	if errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist) {
		code = exitNotFound
	}
	msg := err.Error()
	if !strings.Contains(msg, name) {
		msg = name + ": " + msg
	}
	return &startError{code: code, err: errors.New(msg)}
}

// exitStatus is the shell's view of how the command ended: its exit code, or
// 128 + the signal that killed it.
func exitStatus(cmd *exec.Cmd, werr error) int {
	if cmd.ProcessState == nil {
		return exitSoftware
	}
	if sig, ok := signalOf(cmd.ProcessState); ok {
		return exitSignalOffset + sig
	}
	if code := cmd.ProcessState.ExitCode(); code >= 0 {
		return code
	}
	_ = werr
	return exitSoftware
}
