package redisstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/idem-go/idem/stores/storetest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// corrupter overwrites a record's attempt with garbage, bypassing the store.
func corrupter(c backend) func(t *testing.T, s storekit.Store, key string) {
	return func(t *testing.T, s storekit.Store, key string) {
		rs := s.(*redisstore.Store)
		ctx := context.Background()
		v, err := c.Get(ctx, rs.Key(key)).Result()
		require.NoError(t, err)
		require.NoError(t, c.Set(ctx, rs.Key(key), v[:56]+"not-a-number!"+v[69:], redis.KeepTTL).Err())
	}
}

// TestConformance runs storetest's suites on each deployment (standalone
// Redis and the Cluster, Valkey 8.1 standalone and Cluster, whose SET has
// IFEQ), every store under a fresh prefix: the store's operations, records
// expiring natively, its listing, secret rotation, processes sharing the
// deployment (4 processes x 16 goroutines on 24 keys, plain and in the
// middle of a rotation; with -short, none) and owners killed or stopped in
// the middle of a call's steps (the paused owner's writes, once it runs
// again, refused).
func TestConformance(t *testing.T) {
	bothKinds(t, func(t *testing.T, kind string) {
		c := dial(t, kind)
		newProcessStore := func(prefix string) (storekit.Store, error) {
			return redisstore.New(dial(t, kind), redisstore.WithPrefix(prefix))
		}
		h := storetest.Harness{
			NewStore:     func(t *testing.T) storekit.Store { return newStore(t, c) },
			Corrupt:      corrupter(c),
			NativeExpiry: true,
			Watch:        true,
			List:         func(t *testing.T) storekit.Store { return newStore(t, c) },
			Rotation:     true,
			StepCrash:    &storetest.StepCrashConfig{NewStore: newProcessStore},
			DeadOwner:    &storetest.DeadOwnerConfig{NewStore: newProcessStore, Presence: true},
		}
		if !testing.Short() { // the process suites spawn processes
			// Each goroutine with its own client, store and Guard.
			processes := storetest.ProcessConfig{
				Keys:     24,
				Options:  []idem.Option{idem.WithHeartbeat(500 * time.Millisecond), idem.WithTakeoverAfter(5 * time.Second)},
				NewStore: newProcessStore,
			}
			h.Processes, h.RotationProcesses = &processes, &processes
		}
		storetest.Run(t, h)
	})
}
