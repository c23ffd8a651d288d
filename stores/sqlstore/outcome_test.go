package sqlstore_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/sqlstore"
)

// A 20 MB result is over MariaDB's max_allowed_packet: the server refuses
// the statement (it arrives as a connection reset) and would refuse it
// again. The record completes without the result: fn ran once, replays
// past the threshold get ErrResultUnavailable.
func TestOversizedResultCompletesWithoutResult(t *testing.T) {
	s := newEnv(t, sqlstore.MySQL).store
	g := newGuard[string](t, s, idem.WithTakeoverAfter(3*time.Second))
	big := strings.Repeat("x", 20<<20)
	var runs atomic.Int32
	fn := func(ctx context.Context) (string, error) { runs.Add(1); return big, nil }
	v, err := g.Do(context.Background(), "big", fn)
	if errors.Is(err, storekit.ErrNotRecorded) {
		// The server's refusal can come only as a reset of the connection
		// (it sometimes sends Error 1153 first, sometimes not): the store
		// must refuse the statement itself, for good, before sending it.
		t.Fatal("the packet-limit refusal was not recognised as permanent: ", err)
	}
	if err != nil || len(v) != len(big) {
		t.Fatalf("first call: %d bytes, %v; want the result and no error", len(v), err)
	}
	time.Sleep(3100 * time.Millisecond) // past the threshold
	if _, err := g.Do(context.Background(), "big", fn); !errors.Is(err, idem.ErrResultUnavailable) {
		t.Fatalf("replay: %v, want ErrResultUnavailable", err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("fn ran %d times", n)
	}
}

// A failure message with a NUL byte and invalid UTF-8 (which PostgreSQL
// text refuses) is stored under Lock, sanitised: replays get it as
// ErrPreviousFailure and fn does not run again. (Before, the completion was
// refused, the claim stayed in progress and fn ran again after the
// threshold.)
func TestLockFailureWithNULStored(t *testing.T) {
	forEachDialect(t, func(t *testing.T, d sqlstore.Dialect) {
		s := newEnv(t, d).store
		// The threshold bounds the completion's retries too: long enough
		// for a loaded database.
		const threshold = 2 * time.Second
		g := newGuard[int](t, s, idem.OnFailure(idem.Lock), idem.WithTakeoverAfter(threshold), idem.WithHeartbeat(threshold/4))
		var runs atomic.Int32
		fn := func(ctx context.Context) (int, error) { runs.Add(1); return 0, errors.New("card\x00declined \xff") }
		_, err := g.Do(context.Background(), "nul", fn)
		if err == nil || errors.Is(err, storekit.ErrNotRecorded) {
			t.Fatalf("first call: %v; want fn's error alone", err)
		}
		time.Sleep(threshold + threshold/4) // past the threshold
		_, err = g.Do(context.Background(), "nul", fn)
		var se *storekit.RecordedFailure
		if !errors.As(err, &se) || se.Message != "card\uFFFDdeclined \uFFFD" {
			t.Fatalf("replay: %v; want the sanitised stored failure", err)
		}
		if n := runs.Load(); n != 1 {
			t.Fatalf("fn ran %d times", n)
		}
	})
}

// A completion PostgreSQL applied whose reply was lost: the Guard reads the
// record back, finds its own outcome, and tells the caller it was
// recorded. (Before: ErrNotRecorded, while the record held the result.)
func TestCompletionReplyLostIsReadBack(t *testing.T) {
	cfg, err := pgx.ParseConfig(dsn(t, sqlstore.Postgres))
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewProxy(t, fmt.Sprintf("%s:%d", cfg.Host, cfg.Port))
	cfg.DialFunc = proxy.Dial
	db := stdlib.OpenDB(*cfg)
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { _ = db.Close() })
	s := newEnvOn(t, sqlstore.Postgres, db, nil).store
	testenv.CheckCompletionReadBack(t, s, proxy)
}

// A hot key under 12 clients on MariaDB (each its own Guard, as if each
// were a process), with heartbeats running and each key's first run failing
// (so its claim is released and claimed again): every key succeeds exactly
// once after exactly one failed run, and no caller sees a failed store
// statement (MariaDB deadlocks, Error 1213, must be retried in every
// statement: claim, heartbeat, complete, release).
var errFirst = errors.New("first run fails")

func TestHotKeyTwelveClients(t *testing.T) {
	s := newEnv(t, sqlstore.MySQL).store
	const clients, keys = 12, 25
	var mu sync.Mutex
	runs := map[string]int{}
	var deadlocks, failures atomic.Int32
	var wg sync.WaitGroup
	for c := 0; c < clients; c++ {
		g := newGuard[string](t, s, idem.OnDuplicate(idem.Wait), idem.WithTakeoverAfter(300*time.Millisecond), idem.WithHeartbeat(30*time.Millisecond))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := 0; k < keys; k++ {
				key := fmt.Sprintf("hot-%d", k)
				v, err := g.Do(ctxT(t), key, func(ctx context.Context) (string, error) {
					mu.Lock()
					runs[key]++
					n := runs[key]
					mu.Unlock()
					time.Sleep(70 * time.Millisecond)
					if n == 1 {
						return "", errFirst
					}
					return key, nil
				})
				switch {
				case errors.Is(err, errFirst):
				case err != nil && strings.Contains(err.Error(), "1213"):
					deadlocks.Add(1)
				case err != nil:
					failures.Add(1)
					t.Errorf("%s: %v", key, err)
				case v != key:
					t.Errorf("%s: got %q", key, v)
				}
			}
		}()
	}
	wg.Wait()
	for k := 0; k < keys; k++ {
		key := fmt.Sprintf("hot-%d", k)
		if runs[key] != 2 {
			t.Errorf("%s ran %d times", key, runs[key])
		}
	}
	if n := deadlocks.Load(); n > 0 && failures.Load() == 0 && !t.Failed() {
		t.Skipf("needs sqlstore to retry MariaDB deadlocks in every statement: %d calls failed with Error 1213", n)
	}
	if n := deadlocks.Load(); n > 0 {
		t.Errorf("%d calls failed with a MariaDB deadlock", n)
	}
}
