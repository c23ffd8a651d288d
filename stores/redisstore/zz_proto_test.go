package redisstore_test

import (
	"context"
	"fmt"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/redisstore/redisbench"
	"testing"
	"time"
)

func TestZZProto(t *testing.T) {
	s := benchSetup2(t)
	ctx := context.Background()
	if err := s.PrepareReplays(ctx); err != nil {
		t.Fatal(err)
	}
	for _, w := range []struct {
		name string
		g, r func(context.Context, int) (time.Duration, error)
	}{
		{"native replay pipe vs GET", s.NativeReplay, s.RawReplay},
		{"native replay single vs GET", s.NativeReplaySingle, s.RawReplay},
		{"guard replay vs GET", s.GuardReplay, s.RawReplay},
		{"native fresh vs raw", s.NativeFresh, s.RawFresh},
		{"guard fresh vs raw", s.GuardFresh, s.RawFresh},
	} {
		p, err := redisbench.Compare(ctx, w.name, 20000, 5, w.g, w.r)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("%-32s %8.0f %8.0f %.2f\n", w.name, p.GuardOps, p.RawOps, p.Ratio())
	}
}

func benchSetup2(t *testing.T) *redisbench.Setup {
	addr := testenv.RedisAddr(t)
	gc, rc := redisbench.NewClient(addr), redisbench.NewClient(addr)
	t.Cleanup(func() { _ = gc.Close(); _ = rc.Close() })
	s, err := redisbench.NewSetup(context.Background(), gc, rc)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
