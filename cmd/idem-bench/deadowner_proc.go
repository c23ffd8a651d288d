package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// deadProc is a child process of the dead-owner table, its output read
// line by line.
type deadProc struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{}
}

// deadEnv is what a child is told: its role, its store and namespace, and
// the key, instance ID, hiding and threshold it runs with.
type deadEnv struct {
	role, store, ns, key, instance string
	hide                           bool
	takeover                       time.Duration
}

// startDead starts the idem-bench binary again as a child in e's role.
func startDead(e deadEnv) (*deadProc, error) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), deadRoleEnv+"="+e.role, deadStoreEnv+"="+e.store, deadNSEnv+"="+e.ns,
		deadKeyEnv+"="+e.key, deadInstanceEnv+"="+e.instance)
	if e.hide {
		cmd.Env = append(cmd.Env, deadHideEnv+"=1")
	}
	if e.takeover > 0 {
		cmd.Env = append(cmd.Env, deadTakeoverEnv+"="+e.takeover.String())
	}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &deadProc{cmd: cmd, stdin: stdin, lines: make(chan string, 64), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		_, _ = io.Copy(io.Discard, pr)
	}()
	go func() {
		_ = cmd.Wait()
		_ = pw.Close()
		close(p.done)
	}()
	return p, nil
}

// expect returns the first line of p that starts with prefix, or an error
// when p ends or timeout passes first.
func (p *deadProc) expect(prefix string, timeout time.Duration) (string, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	var seen []string
	for {
		select {
		case line, ok := <-p.lines:
			if !ok {
				return "", fmt.Errorf("the child exited before it printed %q (it printed %q)", prefix, seen)
			}
			if strings.HasPrefix(line, prefix) {
				return line, nil
			}
			seen = append(seen, line)
		case <-t.C:
			return "", fmt.Errorf("the child printed no %q within %v (it printed %q)", prefix, timeout, seen)
		}
	}
}

func (p *deadProc) signal(sig syscall.Signal) { _ = p.cmd.Process.Signal(sig) }

// kill SIGKILLs p and waits for it to end.
func (p *deadProc) kill() {
	p.signal(syscall.SIGCONT)
	p.signal(syscall.SIGKILL)
	<-p.done
}

// send writes a line to p's input.
func (p *deadProc) send(line string) error {
	_, err := io.WriteString(p.stdin, line+"\n")
	return err
}
