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

// RedisServer is a redis-server a test started on a loopback port, so it
// can be killed and restarted without touching the shared servers.
type RedisServer struct {
	Port int
	Addr string // 127.0.0.1:Port

	t    testing.TB
	dir  string
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
	s := &RedisServer{t: t, Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), dir: t.TempDir(), args: args}
	s.Start()
	t.Cleanup(s.Stop)
	return s
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
		"--save", "", "--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log")}, s.args...)
	s.cmd = exec.Command("redis-server", args...)
	s.cmd.Stdout, s.cmd.Stderr = os.Stderr, os.Stderr
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := ping(s.Addr, 200*time.Millisecond)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on %s not ready: %v", s.Addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Stop kills the server (SIGKILL: no graceful shutdown) and waits for it.
func (s *RedisServer) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

func (s *RedisServer) String() string { return "redis-server " + s.Addr }

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
