package redisisr_test

import (
	"context"
	"os"
	"testing"

	"github.com/idem-go/idem/isr/internal/isrtesting"
	"github.com/idem-go/idem/isr/redisisr"
)

// openRedisBackend is the Redis table under prefix, with counters beside
// it.
func openRedisBackend(t *testing.T, prefix string) *isrtesting.ProcBackend {
	c := redisClient(t)
	tb, err := redisisr.NewTable(c, redisisr.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return &isrtesting.ProcBackend{
		Table: tb,
		Add: func(ctx context.Context, pk, name string, delta int64) (int64, error) {
			return c.IncrBy(ctx, prefix+"test:{"+pk+"}:"+name, delta).Result()
		},
		Env: []string{"ISR_LOCATION=" + prefix},
	}
}

// newRedisBackend is a Redis table under a fresh prefix.
func newRedisBackend(t *testing.T) *isrtesting.ProcBackend {
	return openRedisBackend(t, redisPrefix(t, redisClient(t)))
}

// TestHelperProcess is the worker process of the tests below; it does
// nothing in a normal test run.
func TestHelperProcess(t *testing.T) {
	isrtesting.HelperProcess(t, func(t *testing.T) *isrtesting.ProcBackend {
		return openRedisBackend(t, os.Getenv("ISR_LOCATION"))
	})
}

func TestLeaseContentionAcrossProcesses(t *testing.T) {
	isrtesting.RunLeaseContention(t, newRedisBackend(t))
}

func TestOneRegenerationAcrossProcesses(t *testing.T) {
	isrtesting.RunOneRegeneration(t, newRedisBackend(t))
}
