//go:build unix

package testenv

import (
	"os"
	"syscall"
	"testing"
)

// Stop pauses the child (SIGSTOP) and returns once it is stopped
// (WaitStopped).
func (c *Child) Stop(t testing.TB) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatalf("child %d: %v", c.Pid(), err)
	}
	WaitStopped(t, c.Pid())
}

// Continue resumes a child that Stop paused (SIGCONT).
func (c *Child) Continue(t testing.TB) {
	t.Helper()
	if err := c.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatalf("child %d: %v", c.Pid(), err)
	}
}

// resume lets a stopped process run again, so that it can exit.
func resume(p *os.Process) { _ = p.Signal(syscall.SIGCONT) }
