package dynamostore_test

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem"
)

// A 500 KB result makes an item DynamoDB refuses (400 KB limit): the record
// completes without the result, so fn ran once and replays, even past the
// takeover threshold, get ErrResultUnavailable. (Before, the claim stayed in
// progress with ErrNotRecorded and a caller after the threshold ran fn
// again.)
func TestOversizedResultCompletesWithoutResult(t *testing.T) {
	s := newEnv(t).store
	g, err := idem.New[[]byte](s, idem.WithTakeoverAfter(300*time.Millisecond), idem.WithHeartbeat(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte{0xab}, 500<<10)
	var runs atomic.Int32
	fn := func(ctx context.Context) ([]byte, error) { runs.Add(1); return big, nil }
	v, err := g.Do(context.Background(), "big", fn)
	if err != nil || !bytes.Equal(v, big) {
		t.Fatalf("first call: %d bytes, %v; want the result and no error", len(v), err)
	}
	time.Sleep(400 * time.Millisecond) // past the threshold
	if _, err := g.Do(context.Background(), "big", fn); !errors.Is(err, idem.ErrResultUnavailable) {
		t.Fatalf("replay: %v, want ErrResultUnavailable", err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("fn ran %d times", n)
	}
}

// Two Guards with 400 ms and 2 s thresholds on one key: the short one never
// takes over the live claim of the long one.
func TestShortThresholdDoesNotStealLiveClaim(t *testing.T) {
	checkThresholdStoredWithClaim(t, newEnv(t).store)
}

// checkThresholdStoredWithClaim runs fn for 1.5 s under a Guard with a 2 s
// threshold (heartbeat 1 s) while a Guard with a 400 ms threshold calls
// the key every 50 ms: the owner's heartbeat is older than 400 ms most of
// that time, yet the short Guard must always be told ErrInProgress.
func checkThresholdStoredWithClaim(t *testing.T, s idem.Store) {
	t.Helper()
	skipUnlessThresholdStored(t, s)
	long, err := idem.New[int](s, idem.WithTakeoverAfter(2*time.Second), idem.WithHeartbeat(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	short, err := idem.New[int](s, idem.WithTakeoverAfter(400*time.Millisecond), idem.WithHeartbeat(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	_, err = long.Do(context.Background(), "threshold", func(ctx context.Context) (int, error) {
		runs.Add(1)
		for end := time.Now().Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
			_, err := short.Do(context.Background(), "threshold", func(ctx context.Context) (int, error) { runs.Add(1); return 2, nil })
			if !errors.Is(err, idem.ErrInProgress) {
				t.Errorf("short threshold: %v, want ErrInProgress", err)
				break
			}
		}
		return 1, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("fn ran %d times", n)
	}
}

// skipUnlessThresholdStored skips when the store does not yet keep the
// owner's takeover threshold with a claim (the store change that persists
// Record.TakeoverMs); once it does, the test runs.
func skipUnlessThresholdStored(t *testing.T, s idem.Store) {
	t.Helper()
	req := idem.ClaimRequest{Key: storageKey(), Nonce: randHex(16), LeaseTTL: time.Minute, TakeoverAfter: 2 * time.Second}
	if _, err := s.Claim(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	rec, err := s.Get(context.Background(), req.Key)
	if err != nil {
		t.Fatal(err)
	}
	if rec.TakeoverMs == 0 {
		t.Skip("needs the store to persist the claim's takeover threshold (Record.TakeoverMs)")
	}
}
