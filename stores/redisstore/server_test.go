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

	"github.com/idem-go/idem/internal/testenv"
	"github.com/redis/go-redis/v9"
)

// server is a redis-server this test started on a loopback port, so it can
// be killed and restarted without touching the shared servers.
type server struct {
	t    testing.TB
	port int
	addr string
	dir  string
	cmd  *exec.Cmd
}

func startRedis(t testing.TB, port int) *server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		testenv.Missing(t, "redis-server binary not found")
	}
	_ = bin
	s := &server{t: t, port: port, addr: "127.0.0.1:" + strconv.Itoa(port), dir: t.TempDir()}
	s.start()
	t.Cleanup(s.stop)
	return s
}

func (s *server) start() {
	s.t.Helper()
	s.cmd = exec.Command("redis-server", "--bind", "127.0.0.1", "--port", strconv.Itoa(s.port),
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--logfile", filepath.Join(s.dir, "redis.log"))
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
