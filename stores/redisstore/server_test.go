package redisstore_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/idem-go/idem/stores/storetest/testenv"
	"github.com/redis/go-redis/v9"
)

// server is a redis-server this test started on a loopback port, so it can
// be killed and restarted without touching the shared servers.
type server struct {
	t    testing.TB
	port int
	addr string
	dir  string
	args []string
	cmd  *exec.Cmd
}

// startRedisAOF starts a server that persists every write before replying
// (appendonly, appendfsync always), so a restart loses nothing acknowledged.
func startRedisAOF(t testing.TB, port int) *server {
	return startRedis(t, port, "--appendonly", "yes", "--appendfsync", "always")
}

func startRedis(t testing.TB, port int, args ...string) *server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		testenv.Missing(t, "redis-server binary not found")
	}
	s := &server{t: t, port: port, addr: "127.0.0.1:" + strconv.Itoa(port), dir: t.TempDir(), args: args}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *server) start() {
	s.t.Helper()
	args := append([]string{"--bind", "127.0.0.1", "--port", strconv.Itoa(s.port),
		"--save", "", "--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log")}, s.args...)
	s.cmd = exec.Command("redis-server", args...)
	s.cmd.Stdout, s.cmd.Stderr = os.Stderr, os.Stderr
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	c := redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("redis-server on %s not ready: %v", s.addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop kills the server (SIGKILL: no graceful shutdown) and waits for it.
func (s *server) stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.cmd = nil
}

func (s *server) String() string { return fmt.Sprintf("redis-server %s", s.addr) }
