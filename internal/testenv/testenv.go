// Package testenv finds the real servers the tests talk to.
//
// scripts/backends.sh starts them and exports their addresses. A test that
// needs a server the environment does not name is skipped locally; when
// IDEM_REQUIRE_BACKENDS=1 (as .ci/run sets it) it fails instead, so a suite
// can never pass by skipping its real backends.
//
// It also holds the fault-injection and process helpers those tests share
// (Proxy; RedisServer; StartChild, which re-executes the test binary as a
// child process; WaitStopped). It is a public package of the core module,
// standard library only, so that every store module's tests can use it.
package testenv

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/stores/storetest"
)

// Required reports whether missing backends fail the run instead of skipping.
func Required() bool { return os.Getenv("IDEM_REQUIRE_BACKENDS") == "1" }

// Lookup returns the value of the environment variable name, or skips (or,
// when backends are required, fails) the test when it is unset.
func Lookup(t testing.TB, name, what string) string {
	t.Helper()
	v := strings.TrimSpace(os.Getenv(name))
	if v == "" {
		Missing(t, what+" ("+name+" is not set; run scripts/backends.sh)")
	}
	return v
}

// Missing reports an absent backend: a skip locally, a failure when backends
// are required.
func Missing(t testing.TB, why string) {
	t.Helper()
	if Required() {
		t.Fatalf("backend required but unavailable: %s", why)
	}
	t.Skipf("backend unavailable: %s", why)
}

// RedisAddr is the address of a standalone Redis server.
func RedisAddr(t testing.TB) string { return Lookup(t, "IDEM_REDIS_ADDR", "redis") }

// ValkeyRoot returns the root scripts/backends.sh installs Valkey 8.1 in,
// where tests start servers of their own (StartValkey).
func ValkeyRoot(t testing.TB) string { return Lookup(t, "IDEM_VALKEY_ROOT", "valkey 8.1 root") }

// RedisClusterAddrs are the seed addresses of a Redis Cluster.
func RedisClusterAddrs(t testing.TB) []string {
	return strings.Split(Lookup(t, "IDEM_REDIS_CLUSTER", "redis cluster"), ",")
}

// DynamoDBEndpoint is the URL of DynamoDB Local.
func DynamoDBEndpoint(t testing.TB) string {
	return Lookup(t, "IDEM_DYNAMODB_ENDPOINT", "DynamoDB Local")
}

// S3Endpoint is the URL of an S3-compatible server on loopback (path-style
// addressing; access key and secret "S3RVER").
func S3Endpoint(t testing.TB) string { return Lookup(t, "IDEM_S3_ENDPOINT", "S3-compatible server") }

// PostgresDSN is the connection string of a PostgreSQL database the tests
// may create and drop tables in (pgx syntax).
func PostgresDSN(t testing.TB) string { return Lookup(t, "IDEM_POSTGRES_DSN", "PostgreSQL") }

// MySQLDSN is the data source name of a MySQL or MariaDB database the tests
// may create and drop tables in (go-sql-driver/mysql syntax).
func MySQLDSN(t testing.TB) string { return Lookup(t, "IDEM_MYSQL_DSN", "MySQL/MariaDB") }

// NATSURL is the URL of a NATS server with JetStream.
func NATSURL(t testing.TB) string { return Lookup(t, "IDEM_NATS_URL", "NATS with JetStream") }

// AMQPURL is the URL of a RabbitMQ (AMQP 0-9-1) server the tests may
// declare and delete queues on.
func AMQPURL(t testing.TB) string { return Lookup(t, "IDEM_AMQP_URL", "RabbitMQ") }

// WaitStopped waits until process pid is in the stopped state after a
// SIGSTOP. kill(2) returns before the signal takes effect, so a test that
// sends SIGSTOP and then acts as if the process were paused must wait for
// this first: the process may otherwise run on for a moment on another
// core. Where /proc cannot tell, it waits a short while.
func WaitStopped(t testing.TB, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			return
		}
		// The state follows the parenthesised command name.
		if i := strings.LastIndexByte(string(b), ')'); i > 0 && len(b) > i+2 && (b[i+2] == 'T' || b[i+2] == 't') {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("process %d did not stop", pid)
}

// Clock is a settable clock for stores' WithClock options: the one the
// conformance suite hands stores.
type Clock = storetest.Clock

// NewClock returns a Clock set to the current time, to the millisecond.
func NewClock() *Clock { return storetest.NewClock() }
