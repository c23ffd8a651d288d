// Command benchtable prints the Redis store's benchmark table: guarded
// fresh calls and replays against raw go-redis doing the same commands
// (64 goroutines, one run), and the wait wake-up latency with push against
// a poll.
//
//	go run ./stores/redisstore/internal/benchtable -addr 127.0.0.1:6379
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/idem-go/idem/stores/redisstore/redisbench"
)

func main() {
	addr := flag.String("addr", envOr("IDEM_REDIS_ADDR", "127.0.0.1:6379"), "Redis address")
	calls := flag.Int("calls", 20000, "calls per variant per round")
	rounds := flag.Int("rounds", 3, "alternating rounds")
	samples := flag.Int("wake-samples", 10, "wake-up samples per mode")
	takeover := flag.Duration("takeover", 30*time.Second, "Guard takeover threshold for the wake-up test (bounds the poll interval)")
	flag.Parse()
	if err := run(*addr, *calls, *rounds, *samples, *takeover); err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func run(addr string, calls, rounds, samples int, takeover time.Duration) error {
	ctx := context.Background()
	gc, rc := redisbench.NewClient(addr), redisbench.NewClient(addr)
	defer gc.Close()
	defer rc.Close()
	if err := redisbench.Table(ctx, os.Stdout, "Redis "+addr, gc, rc, calls, rounds); err != nil {
		return err
	}
	fmt.Printf("\nwait wake-up latency after the owner finishes (takeover %v, %d samples):\n", takeover, samples)
	for _, poll := range []bool{false, true} {
		owner, waiter := redisbench.NewClient(addr), redisbench.NewClient(addr)
		lat, err := redisbench.WakeLatency(ctx, owner, waiter, poll, samples, takeover)
		_ = owner.Close()
		_ = waiter.Close()
		if err != nil {
			return err
		}
		mode := "push (pub/sub)"
		if poll {
			mode = "poll (no Watcher)"
		}
		fmt.Printf("%-20s median %10v  max %10v\n", mode, redisbench.Median(lat).Round(time.Microsecond), lat[len(lat)-1].Round(time.Microsecond))
	}
	return nil
}
