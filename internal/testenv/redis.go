package testenv

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// RedisServer is a redis-server (or valkey-server) a test started on a
// loopback port, so it can be killed and restarted without touching the
// shared servers.
type RedisServer struct {
	Port int
	Addr string // 127.0.0.1:Port

	t    testing.TB
	bin  string // redis-server or valkey-server
	root string // the root bin runs chrooted in; "" for the host's
	dir  string // its directory, inside root
	args []string
	cmd  *exec.Cmd
}

// StartRedis starts redis-server on port with the extra arguments args,
// in a temporary directory, and waits until it answers PING; it is killed
// when the test ends. A missing redis-server binary is a missing backend
// (see Missing).
func StartRedis(t testing.TB, port int, args ...string) *RedisServer {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		Missing(t, "redis-server binary not found")
	}
	s := &RedisServer{t: t, Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), bin: "redis-server", args: args}
	s.dir = s.TempDir()
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// StartValkey is StartRedis for valkey-server (Valkey 8.1 or later, whose
// SET has IFEQ), run chrooted in the root scripts/backends.sh installs it
// in (IDEM_VALKEY_ROOT; a missing root is a missing backend). Running it
// needs the right to chroot.
func StartValkey(t testing.TB, port int, args ...string) *RedisServer {
	t.Helper()
	root := ValkeyRoot(t)
	if err := os.MkdirAll(filepath.Join(root, "tmp"), 0o1777); err != nil {
		t.Fatal(err)
	}
	s := &RedisServer{t: t, Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), bin: "valkey-server", root: root, args: args}
	s.dir = s.TempDir()
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

// Command returns the command that runs the server's binary with args
// (another server of the same kind, or a Sentinel with --sentinel):
// chrooted for a Valkey server, whose paths are then inside its root (see
// Path).
func (s *RedisServer) Command(args ...string) *exec.Cmd {
	if s.root == "" {
		return exec.Command(s.bin, args...)
	}
	return exec.Command("chroot", append([]string{s.root, s.bin}, args...)...)
}

// Path returns the path the server's binary sees for the local path p
// (inside the server's root).
func (s *RedisServer) Path(p string) string {
	if s.root == "" {
		return p
	}
	return "/" + strings.TrimPrefix(strings.TrimPrefix(p, s.root), "/")
}

// TempDir returns a new directory the server's binaries can reach (inside
// its root), removed when the test ends.
func (s *RedisServer) TempDir() string {
	s.t.Helper()
	if s.root == "" {
		return s.t.TempDir()
	}
	dir, err := os.MkdirTemp(filepath.Join(s.root, "tmp"), "idem-test-")
	if err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

// Signal sends sig to the running server (SIGSTOP pauses it, SIGCONT
// resumes it).
func (s *RedisServer) Signal(sig os.Signal) error {
	if s.cmd == nil || s.cmd.Process == nil {
		return os.ErrProcessDone
	}
	return s.cmd.Process.Signal(sig)
}

// StartRedisAOF starts a server that persists every write before replying
// (appendonly, appendfsync always), so a restart loses nothing
// acknowledged.
func StartRedisAOF(t testing.TB, port int) *RedisServer {
	t.Helper()
	return StartRedis(t, port, "--appendonly", "yes", "--appendfsync", "always")
}

// Start (re)starts the server, in the same directory, and waits until it
// answers PING.
func (s *RedisServer) Start() {
	s.t.Helper()
	args := append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(s.Port),
		"--save", "", "--dir", s.Path(s.dir), "--logfile", "server.log"}, s.args...)
	s.cmd = s.Command(args...)
	s.cmd.Stdout, s.cmd.Stderr = os.Stderr, os.Stderr
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", s.bin, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ping(s.Addr, 200*time.Millisecond)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s on %s not ready: %v", s.bin, s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server (SIGKILL: no graceful shutdown; a paused server
// dies too) and waits for it.
func (s *RedisServer) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

func (s *RedisServer) String() string { return s.bin + " " + s.Addr }

// ping sends PING to the Redis server at addr and expects +PONG.
func ping(addr string, timeout time.Duration) error {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line = strings.TrimSpace(line); line != "+PONG" {
		return fmt.Errorf("PING: %s", line)
	}
	return nil
}
