package storetest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"
)

// ListKeys are the storage keys MakeStates writes, by the state each is
// left in; Expired is a released claim, which no listing may yield.
type ListKeys struct {
	InProgress, Stale, Failed, Completed, Expired string
}

// ByState returns the live keys by the state a listing must report.
func (k ListKeys) ByState() map[string]storekit.RecordState {
	return map[string]storekit.RecordState{
		k.InProgress: storekit.StateInProgress, k.Stale: storekit.StateStale,
		k.Failed: storekit.StateFailed, k.Completed: storekit.StateCompleted,
	}
}

// StaleAfter is the takeover threshold of the claim MakeStates leaves
// stale: it is stale once this long has passed since MakeStates returned.
const StaleAfter = 300 * time.Millisecond

// MakeStates writes, through s's own calls, one record in each state under
// fresh storage keys: an in-progress claim (takeover threshold one hour),
// a claim with a takeover threshold of StaleAfter (stale once that has
// passed), a failed and a completed record, and a released claim
// (expired).
func MakeStates(t testing.TB, s storekit.Store) ListKeys {
	t.Helper()
	ctx := context.Background()
	var b [8]byte
	_, _ = rand.Read(b[:])
	run := hex.EncodeToString(b[:])
	key := func(name string) string {
		sum := sha256.Sum256([]byte(run + "/" + name))
		return storekit.StorageKeyPrefix + hex.EncodeToString(sum[:])
	}
	k := ListKeys{InProgress: key("in_progress"), Stale: key("stale"), Failed: key("failed"),
		Completed: key("completed"), Expired: key("expired")}
	claim := func(key string, takeover time.Duration) string {
		t.Helper()
		nonce := "n-" + key[len(key)-12:]
		res, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: nonce, LeaseTTL: time.Hour, TakeoverAfter: takeover})
		if err != nil || res.Outcome != storekit.Claimed {
			t.Fatalf("claim %s: %v, %v", key, res.Outcome, err)
		}
		return nonce
	}
	claim(k.InProgress, time.Hour)
	claim(k.Stale, StaleAfter)
	n := claim(k.Failed, time.Hour)
	if err := s.Complete(ctx, k.Failed, n, storekit.Completion{Status: storekit.StatusFailed,
		Error: &storekit.RecordedFailure{Message: "boom"}, TTL: time.Hour}); err != nil {
		t.Fatalf("complete failed: %v", err)
	}
	n = claim(k.Completed, time.Hour)
	if err := s.Complete(ctx, k.Completed, n, storekit.Completion{Status: storekit.StatusCompleted,
		Result: []byte(`{"ok":true}`), TTL: time.Hour}); err != nil {
		t.Fatalf("complete: %v", err)
	}
	n = claim(k.Expired, time.Hour)
	if err := s.Release(ctx, k.Expired, n); err != nil {
		t.Fatalf("release: %v", err)
	}
	return k
}

// runList checks a store's storekit.Lister: records in each state made by
// MakeStates are listed back, each once, in its state once the stale one's
// threshold has passed; the released one is not listed; a claim is not
// held up by a listing paused at a record; and a listing stops when its
// caller stops.
func runList(t *testing.T, s storekit.Store) {
	t.Helper()
	l, ok := s.(storekit.Lister)
	if !ok {
		t.Fatalf("%T does not implement storekit.Lister", s)
	}
	k := MakeStates(t, s)
	time.Sleep(2 * StaleAfter)
	want := k.ByState()
	got := map[string]storekit.RecordState{}
	for rec, err := range l.Records(context.Background()) {
		if err != nil {
			t.Fatalf("Records: %v", err)
		}
		if rec.Key == k.Expired {
			t.Errorf("the released (expired) record was listed: %+v", rec)
		}
		if _, ours := want[rec.Key]; !ours {
			continue
		}
		if _, dup := got[rec.Key]; dup {
			t.Errorf("%s listed twice", rec.Key)
		}
		got[rec.Key] = rec.State(time.Now().UnixMilli(), (30 * time.Second))
	}
	for key, st := range want {
		if got[key] != st {
			t.Errorf("%s: listed as %q, want %q", key, got[key], st)
		}
	}
	// A listing paused at a record (its caller busy) holds nothing a claim
	// waits for: a claim of that very key, and of a new one, answer.
	n := 0
	for rec, err := range l.Records(context.Background()) {
		if err != nil {
			t.Fatalf("Records: %v", err)
		}
		n++
		for _, key := range []string{rec.Key, k.Expired} {
			done := make(chan error, 1)
			go func() {
				_, err := s.Claim(context.Background(), storekit.ClaimRequest{Key: key, Nonce: "list-probe",
					LeaseTTL: time.Hour, TakeoverAfter: time.Hour})
				done <- err
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("a claim of %s during a listing: %v", key, err)
				}
			case <-time.After(30 * time.Second):
				t.Fatalf("a claim of %s waited 30s for a listing paused at that record", key)
			}
		}
		break
	}
	if n != 1 {
		t.Errorf("a listing stopped after its first record yielded %d", n)
	}
}
