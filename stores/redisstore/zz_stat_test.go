package redisstore_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

func TestZZStat(t *testing.T) {
	s := benchSetup2(t)
	ctx := context.Background()
	if err := s.PrepareReplays(ctx); err != nil {
		t.Fatal(err)
	}
	mon := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
	show := func(name string) {
		st := mon.Info(ctx, "commandstats").Val()
		for _, l := range strings.Split(st, "\r\n") {
			if strings.Contains(l, "calls=") && !strings.Contains(l, "cmdstat_info") && !strings.Contains(l, "cmdstat_config") {
				fmt.Println(name, l)
			}
		}
	}
	for _, w := range []struct {
		name string
		f    func(context.Context, int) (time.Duration, error)
	}{{"rawget", s.RawReplay}, {"guardreplay", s.GuardReplay}, {"nativereplay", s.NativeReplay}, {"nativereplaytx", s.NativeReplayTx}} {
		mon.ConfigResetStat(ctx)
		if _, err := w.f(ctx, 20000); err != nil {
			t.Fatal(err)
		}
		show(w.name)
	}
}
