package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/storekit"
)

// deadBench is one store of the dead-owner table, opened on its namespace
// in the measuring process.
type deadBench struct {
	ds         deadStore
	ns, addr   string
	store      storekit.Store
	closeStore func()
}

// timed is when a caller got its result, or why it did not.
type timed struct {
	at  time.Time
	err error
}

// killRun measures one SIGKILL: a child claims a key and is killed at a
// random point inside fn, while a duplicate waits (OnDuplicate(Wait)) and
// another caller retries every 100 ms (Return). It returns the time from
// the kill to the waiter's result and to the retrier's first success.
// hidden hides the store's presence from every Guard (before).
func (b *deadBench) killRun(hidden bool) (wait, retry time.Duration, err error) {
	key := "kill-" + randName()
	owner, err := startDead(deadEnv{role: "hold", store: b.ds.name, ns: b.ns, key: key, hide: hidden})
	if err != nil {
		return 0, 0, err
	}
	defer owner.kill()
	if _, err := owner.expect("infn", 30*time.Second); err != nil {
		return 0, 0, err
	}
	s := b.store
	if hidden {
		s = hide(s)
	}
	var runs atomic.Int32
	fn := func(context.Context) (string, error) { runs.Add(1); return "taker", nil }
	waited, retried := make(chan timed, 1), make(chan timed, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	go func() {
		g, err := idem.New[string](s, idem.OnDuplicate(idem.Wait))
		if err == nil {
			_, err = g.Do(ctx, key, fn)
		}
		waited <- timed{time.Now(), err}
	}()
	go func() { retried <- retryEvery(ctx, s, key, fn) }()
	// The waiter is waiting; the owner is somewhere in fn.
	time.Sleep(100*time.Millisecond + rand.N(200*time.Millisecond))
	owner.signal(syscall.SIGKILL)
	killed := time.Now()
	w, r := <-waited, <-retried
	if err := errors.Join(w.err, r.err); err != nil {
		return 0, 0, err
	}
	if n := runs.Load(); n != 1 {
		return 0, 0, fmt.Errorf("fn ran %d times after the kill, want 1", n)
	}
	return w.at.Sub(killed), r.at.Sub(killed), nil
}

// retryEvery calls key every 100 ms (Return) until a call succeeds.
func retryEvery(ctx context.Context, s storekit.Store, key string, fn func(context.Context) (string, error)) timed {
	g, err := idem.New[string](s)
	if err != nil {
		return timed{err: err}
	}
	for {
		_, err := g.Do(ctx, key, fn)
		if !errors.Is(err, idem.ErrInProgress) {
			return timed{time.Now(), err}
		}
		select {
		case <-ctx.Done():
			return timed{err: ctx.Err()}
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// restartRun measures one restart: a child started WithInstanceID(id)
// claims a key and is SIGKILLed at a random point inside fn; a new child
// with the same id is started at once and calls the key (Return, every
// 100 ms until it gets a result). It returns the time from the kill to the
// new process's result.
func (b *deadBench) restartRun() (time.Duration, error) {
	key, id := "restart-"+randName(), "i-"+randName()
	first, err := startDead(deadEnv{role: "hold", store: b.ds.name, ns: b.ns, key: key, instance: id})
	if err != nil {
		return 0, err
	}
	defer first.kill()
	if _, err := first.expect("infn", 30*time.Second); err != nil {
		return 0, err
	}
	time.Sleep(rand.N(300 * time.Millisecond))
	first.signal(syscall.SIGKILL)
	killed := time.Now()
	again, err := startDead(deadEnv{role: "take", store: b.ds.name, ns: b.ns, key: key, instance: id})
	if err != nil {
		return 0, err
	}
	defer again.kill()
	line, err := again.expect("RESULT", 2*time.Minute)
	if err != nil {
		return 0, err
	}
	d := time.Since(killed)
	if !strings.HasPrefix(line, "RESULT taker ") || strings.HasSuffix(line, " 0") || strings.HasSuffix(line, " 1") {
		return 0, fmt.Errorf("the restarted process: %q, want it to take the claim over and run fn", line)
	}
	return d, nil
}
