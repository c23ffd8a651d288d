package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"time"

	"github.com/idem-go/idem"
)

// The environment of a child process of the dead-owner table: the
// idem-bench binary run again, in a role.
const (
	deadRoleEnv     = "IDEM_BENCH_DEAD_ROLE" // hold, take or finish
	deadStoreEnv    = "IDEM_BENCH_DEAD_STORE"
	deadNSEnv       = "IDEM_BENCH_DEAD_NS"
	deadKeyEnv      = "IDEM_BENCH_DEAD_KEY"
	deadInstanceEnv = "IDEM_BENCH_DEAD_INSTANCE"
	deadHideEnv     = "IDEM_BENCH_DEAD_HIDE"     // 1: the Guard does not see the store's presence
	deadTakeoverEnv = "IDEM_BENCH_DEAD_TAKEOVER" // WithTakeoverAfter, "" for the default
)

// deadChild is the work of a child process; it returns the exit code.
//
//   - hold: claims the key; fn prints "infn", sleeps 0-200 ms and blocks
//     (it is SIGKILLed there).
//   - take: calls the key every 100 ms (Return) until it gets a result,
//     and prints "RESULT value token" (token 0 for a replay).
//   - finish: for each line "claim KEY" on its input, claims KEY; fn
//     prints "claimed KEY" and returns "owner" at the next input line;
//     then it prints "RESULT KEY value" or "RESULT KEY ERROR ...".
func deadChild() int {
	ds, ok := findDeadStore(os.Getenv(deadStoreEnv))
	if !ok {
		fmt.Println("unknown store", os.Getenv(deadStoreEnv))
		return 2
	}
	ctx := context.Background()
	s, closeStore, err := ds.open(ctx, os.Getenv(ds.env), os.Getenv(deadNSEnv), false)
	if err != nil {
		fmt.Println("open:", err)
		return 2
	}
	defer closeStore()
	if os.Getenv(deadHideEnv) == "1" {
		s = hide(s)
	}
	var opts []idem.Option
	if id := os.Getenv(deadInstanceEnv); id != "" {
		opts = append(opts, idem.WithInstanceID(id))
	}
	if d, err := time.ParseDuration(os.Getenv(deadTakeoverEnv)); err == nil {
		opts = append(opts, idem.WithTakeoverAfter(d))
	}
	g, err := idem.New[string](s, opts...)
	if err != nil {
		fmt.Println("idem.New:", err)
		return 2
	}
	switch os.Getenv(deadRoleEnv) {
	case "hold":
		_, err = g.Do(ctx, os.Getenv(deadKeyEnv), func(context.Context) (string, error) {
			fmt.Println("infn")
			time.Sleep(rand.N(200 * time.Millisecond))
			select {} // SIGKILLed here
		})
		fmt.Println("RESULT ERROR", err)
	case "take":
		deadTake(ctx, g, os.Getenv(deadKeyEnv))
	case "finish":
		deadFinish(ctx, g)
	}
	return 0
}

func findDeadStore(name string) (deadStore, bool) {
	for _, ds := range deadStores() {
		if ds.name == name {
			return ds, true
		}
	}
	return deadStore{}, false
}

// deadTake calls key every 100 ms until it gets a result (a minute at
// most), and prints it.
func deadTake(ctx context.Context, g *idem.Guard[string], key string) {
	deadline := time.Now().Add(time.Minute)
	for {
		var tok int64
		v, err := g.Do(ctx, key, func(ctx context.Context) (string, error) {
			tok, _ = idem.FencingToken(ctx)
			return "taker", nil
		})
		if err == nil {
			fmt.Println("RESULT", v, tok)
			return
		}
		if !errors.Is(err, idem.ErrInProgress) || time.Now().After(deadline) {
			fmt.Println("RESULT ERROR", strings.ReplaceAll(err.Error(), "\n", " "))
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// deadFinish claims the keys its input names, one at a time, each fn
// returning at the input's next line.
func deadFinish(ctx context.Context, g *idem.Guard[string]) {
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		key, ok := strings.CutPrefix(in.Text(), "claim ")
		if !ok {
			continue
		}
		release := make(chan struct{})
		done := make(chan struct{})
		go func() {
			defer close(done)
			v, err := g.Do(ctx, key, func(context.Context) (string, error) {
				fmt.Println("claimed", key)
				<-release
				return "owner", nil
			})
			if err != nil {
				fmt.Println("RESULT", key, "ERROR", strings.ReplaceAll(err.Error(), "\n", " "))
			} else {
				fmt.Println("RESULT", key, v)
			}
		}()
		in.Scan() // the next line, or the end of the input, releases fn
		close(release)
		<-done
	}
}
