package redisstore_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/redisstore"
)

// TestUnreachableServerNamed: a call on a Redis that is down fails with an
// error that names the address it could not reach and still wraps the
// dial error (errors.As finds the *net.OpError).
func TestUnreachableServerNamed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now
	client := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer client.Close()
	store, err := redisstore.New(client)
	require.NoError(t, err)
	defer store.Close()
	g, err := idem.New[string](store)
	require.NoError(t, err)
	_, err = g.Do(context.Background(), "k", func(context.Context) (string, error) {
		t.Fatal("fn ran on an unreachable store")
		return "", nil
	})
	require.Error(t, err)
	t.Log(err)
	require.Contains(t, err.Error(), "redisstore: claim ")
	require.Contains(t, err.Error(), ": cannot reach the Redis server at "+addr+": dial tcp")
	var oe *net.OpError
	require.True(t, errors.As(err, &oe), "%v", err)
	require.False(t, strings.Contains(err.Error(), "replica check"), "%v", err)
}
