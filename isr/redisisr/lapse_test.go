package redisisr_test

import (
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/isr/internal/isrtesting"
	"github.com/idem-go/idem/isr/redisisr"
)

// A lease holder whose refreshes fail stops rendering before another worker
// could acquire the lease, and does not publish: the holder's connection
// to Redis is cut (a black hole, so its refreshes hang).
func TestLeaseLapseStopsRender(t *testing.T) {
	direct := redisClient(t)
	prefix := redisPrefix(t, direct)
	proxy := isrtesting.NewCutProxy(t, testenv.RedisAddr(t))
	viaProxy := redis.NewClient(&redis.Options{Addr: proxy.Addr(), MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = viaProxy.Close() })
	holder, err := redisisr.NewTable(viaProxy, redisisr.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	other, err := redisisr.NewTable(direct, redisisr.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	isrtesting.RunLeaseLapse(t, isrtesting.LapseCase{Holder: holder, Other: other, Cut: proxy.Cut})
}
