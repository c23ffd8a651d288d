package redisstore_test

import (
	"context"
	"testing"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/stores/redisstore"
	"github.com/idem-go/idem/stores/storetest"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// corrupter overwrites a record's attempt with garbage, bypassing the store.
func corrupter(c backend) storetest.Option {
	return storetest.WithCorrupter(func(t *testing.T, s storekit.Store, key string) {
		rs := s.(*redisstore.Store)
		ctx := context.Background()
		v, err := c.Get(ctx, rs.Key(key)).Result()
		require.NoError(t, err)
		require.NoError(t, c.Set(ctx, rs.Key(key), v[:56]+"not-a-number!"+v[69:], redis.KeepTTL).Err())
	})
}

func TestConformance(t *testing.T) {
	both(t, func(t *testing.T, c backend) {
		storetest.Run(t, func(t *testing.T) storekit.Store { return newStore(t, c) }, corrupter(c), storetest.WithNativeExpiry())
	})
}
