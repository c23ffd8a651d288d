package redisstore_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/redisstore"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	eoProcs      = 4
	eoGoroutines = 16
	eoKeys       = 24
)

// TestExactlyOnceProcesses runs 4 OS processes (this test binary, re-run as
// TestExactlyOnceChild) x 16 goroutines, all calling Do on the same 24 keys
// through their own client, store and Guard. Each execution of fn INCRs a
// per-key counter in Redis; every counter must end at exactly 1, and every
// caller of a key must have been handed the one execution's result.
func TestExactlyOnceProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	bothKinds(t, func(t *testing.T, kind string) {
		var c backend
		if kind == "standalone" {
			c = standalone(t)
		} else {
			c = cluster(t)
		}
		ctx := ctxT(t)
		pfx := prefix()
		start := time.Now().Add(500 * time.Millisecond).UnixMilli()
		outs := make([]bytes.Buffer, eoProcs)
		var wg sync.WaitGroup
		errs := make([]error, eoProcs)
		for i := range eoProcs {
			cmd := exec.Command(os.Args[0], "-test.run=^TestExactlyOnceChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), "IDEM_EO_CHILD=1", "IDEM_EO_KIND="+kind, "IDEM_EO_PREFIX="+pfx,
				"IDEM_EO_START="+strconv.FormatInt(start, 10))
			cmd.Stdout, cmd.Stderr = &outs[i], &outs[i]
			wg.Add(1)
			go func() { defer wg.Done(); errs[i] = cmd.Run() }()
		}
		wg.Wait()
		results := map[string]map[string]int{} // key -> result -> callers
		for i := range eoProcs {
			require.NoError(t, errs[i], "child %d:\n%s", i, outs[i].String())
			sc := bufio.NewScanner(&outs[i])
			for sc.Scan() {
				f := strings.Fields(sc.Text())
				if len(f) == 3 && f[0] == "RESULT" {
					if results[f[1]] == nil {
						results[f[1]] = map[string]int{}
					}
					results[f[1]][f[2]]++
				}
			}
		}
		require.Len(t, results, eoKeys)
		for k := range eoKeys {
			key := "key-" + strconv.Itoa(k)
			n, err := c.Get(ctx, pfx+"execs:{"+key+"}").Int()
			require.NoError(t, err)
			assert.Equal(t, 1, n, "executions of %s", key)
			assert.Len(t, results[key], 1, "%s: every caller got the same result: %v", key, results[key])
			total := 0
			for _, v := range results[key] {
				total += v
			}
			assert.Equal(t, eoProcs*eoGoroutines, total, "%s: every call returned a result", key)
		}
	})
}

// TestExactlyOnceChild is one process of TestExactlyOnceProcesses.
func TestExactlyOnceChild(t *testing.T) {
	if os.Getenv("IDEM_EO_CHILD") != "1" {
		t.Skip("run by TestExactlyOnceProcesses")
	}
	pfx := os.Getenv("IDEM_EO_PREFIX")
	var c backend
	if os.Getenv("IDEM_EO_KIND") == "standalone" {
		c = standalone(t)
	} else {
		c = cluster(t)
	}
	s := redisstore.New(c, redisstore.WithPrefix(pfx))
	defer s.Close()
	g, err := idem.New[string](s, idem.OnDuplicate(idem.Wait),
		idem.WithHeartbeat(500*time.Millisecond), idem.WithTakeoverAfter(5*time.Second))
	require.NoError(t, err)
	startMs, _ := strconv.ParseInt(os.Getenv("IDEM_EO_START"), 10, 64)
	time.Sleep(time.Until(time.UnixMilli(startMs)))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var mu sync.Mutex
	var wg sync.WaitGroup
	for gi := range eoGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			order := rand.Perm(eoKeys)
			for _, k := range order {
				key := "key-" + strconv.Itoa(k)
				v, err := g.Do(ctx, key, func(ctx context.Context) (string, error) {
					if err := c.Incr(ctx, pfx+"execs:{"+key+"}").Err(); err != nil {
						return "", err
					}
					time.Sleep(time.Duration(rand.IntN(5)) * time.Millisecond)
					tok, _ := idem.FencingToken(ctx)
					return fmt.Sprintf("pid%d-g%d-t%d", os.Getpid(), gi, tok), nil
				})
				if err != nil {
					t.Errorf("Do %s: %v", key, err)
					continue
				}
				mu.Lock()
				fmt.Printf("RESULT %s %s\n", key, v)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
}
