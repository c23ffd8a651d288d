package redisisr_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/isr/internal/isrtesting"
)

func redisRaw(t *testing.T, c redis.UniversalClient) isrtesting.RawTable {
	tb := newRedisTable(t, c)
	return isrtesting.RawTable{
		Table:        tb,
		PointerGuard: true,
		Put: func(t *testing.T, pk, sk string, item map[string]any) {
			var args []any
			for k, v := range item {
				if n, ok := v.(isrtesting.RawN); ok {
					v = string(n)
				}
				args = append(args, k, v)
			}
			if err := c.HSet(context.Background(), tb.Key(pk, sk), args...).Err(); err != nil {
				t.Fatal(err)
			}
		},
		Raw: func(t *testing.T, pk, sk string) map[string]any {
			h, err := c.HGetAll(context.Background(), tb.Key(pk, sk)).Result()
			if err != nil {
				t.Fatal(err)
			}
			out := map[string]any{}
			for k, v := range h {
				if isrtesting.NumberAttrs[k] {
					out[k] = isrtesting.RawN(v)
				} else {
					out[k] = v
				}
			}
			return out
		},
	}
}

func TestRedisForeignItems(t *testing.T) {
	isrtesting.RunForeignItems(t, redisRaw(t, redisClient(t)))
}

func TestRedisClusterForeignItems(t *testing.T) {
	isrtesting.RunForeignItems(t, redisRaw(t, redisCluster(t)))
}
