package redisisr_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/internal/isrtesting"
	"github.com/idem-go/idem/isr/redisisr"
)

// TestRedisTableLifecycle: every LOCK, REQ# and superseded VER# item the
// Redis table writes carries a native expiry at its ttl, and the server
// removes them: after each round the keys return to the pages' META and
// current VER# rows. Each round waits for the ttl of what it wrote (about
// 3s: lease 1s rounded up + buffer 1s).
func TestRedisTableLifecycle(t *testing.T) {
	client := redisClient(t)
	prefix := redisPrefix(t, client)
	tb, err := redisisr.NewTable(client, redisisr.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	pagesA, pagesB := isrtesting.NewPKs(t, 2), isrtesting.NewPKs(t, 2)
	keys := func() []string {
		var ks []string
		iter := client.Scan(ctx, 0, prefix+"*", 1000).Iterator()
		for iter.Next(ctx) {
			ks = append(ks, iter.Val())
		}
		if err := iter.Err(); err != nil {
			t.Fatal(err)
		}
		return ks
	}
	var counts []int
	for round := range 3 {
		start := time.Now()
		isrtesting.ServerLoad(t, tb, time.Now, pagesA, pagesB, 30)
		for _, k := range keys() {
			ttl, err := client.PTTL(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			sk, cur := k[strings.LastIndex(k, "}:")+2:], ""
			if strings.HasPrefix(sk, isr.VersionSKPrefix) {
				cur, _ = client.HGet(ctx, k[:strings.LastIndex(k, "}:")+2]+isr.SKMeta, "current_sk").Result()
			}
			lives := sk == isr.SKMeta || sk == cur
			switch {
			case lives && ttl != -1:
				t.Fatalf("round %d: %s has expiry %v; META and the current VER# must have none", round, sk, ttl)
			case !lives && (ttl == -1 || ttl > 3*time.Second):
				// (-2: expired since the scan.)
				t.Fatalf("round %d: %s has expiry %v; want one within its ttl (<= 3s)", round, sk, ttl)
			}
		}
		// Everything written expires within 3s of its write; poll from
		// the end of the load, allowing 3s more for a slow machine.
		end := time.Now()
		n := len(keys())
		for n != 2*len(pagesA)+len(pagesB) && time.Since(end) < 6*time.Second {
			time.Sleep(100 * time.Millisecond)
			n = len(keys())
		}
		counts = append(counts, n)
		_ = start
	}
	for _, c := range counts {
		if c != 2*len(pagesA)+len(pagesB) {
			t.Fatalf("keys after each round's ttl: %v; want %d (META of 4 pages, current VER# of 2)", counts, 2*len(pagesA)+len(pagesB))
		}
	}
}
