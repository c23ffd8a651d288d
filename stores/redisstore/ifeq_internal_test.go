package redisstore

import "testing"

// TestHasIfEq: SET ... IFEQ is assumed only for Valkey 8.1+ and Redis 8.4+,
// read from INFO server; anything else (an older server, another server
// that reports a Redis version, a version that does not parse) keeps the
// complete script.
func TestHasIfEq(t *testing.T) {
	for _, c := range []struct {
		info string
		want bool
	}{
		{"# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.1.1\r\n", true},
		{"redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n", false},
		{"redis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:9.0.0\r\n", true},
		{"redis_version:7.0.15\r\n", false},
		{"redis_version:8.2.1\r\n", false},
		{"redis_version:8.4.0\r\n", true},
		{"redis_version:10.0.0\r\nserver_name:redis\r\n", true},
		{"redis_version:8.4.0\r\nserver_name:dragonfly\r\n", false},
		{"redis_version:8.x\r\n", false},
		{"redis_version:\r\n", false},
		{"", false},
	} {
		if got := hasIfEq(c.info); got != c.want {
			t.Errorf("hasIfEq(%q) = %v, want %v", c.info, got, c.want)
		}
	}
}
