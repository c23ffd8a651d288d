package dynamostore_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/attributevalue"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/dynamostore"
	"github.com/idem-go/idem/stores/storetest"
)

func claimReq(key, nonce string) storekit.ClaimRequest {
	return storekit.ClaimRequest{Key: key, Nonce: nonce, PayloadHash: "ph", LeaseTTL: time.Minute, TakeoverAfter: 10 * time.Second}
}

func mustClaim(t *testing.T, s storekit.Store, req storekit.ClaimRequest, want storekit.ClaimOutcome) *storekit.Record {
	t.Helper()
	res, err := s.Claim(context.Background(), req)
	if err != nil {
		t.Fatalf("claim %s: %v", req.Nonce, err)
	}
	if res.Outcome != want {
		t.Fatalf("claim %s: outcome %v, want %v (record %+v)", req.Nonce, res.Outcome, want, res.Record)
	}
	return res.Record
}

func wantOps(t *testing.T, e *env, want ...string) {
	t.Helper()
	if got := e.log.Take(); !slices.Equal(got, want) {
		t.Fatalf("requests %v, want %v", got, want)
	}
}

// rawItem reads the item behind key as stored.
func rawItem(t *testing.T, e *env, key string) map[string]types.AttributeValue {
	t.Helper()
	out, err := e.client.GetItem(context.Background(), &dynamodb.GetItemInput{
		TableName: aws.String(testTable), ConsistentRead: aws.Bool(true),
		Key: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: e.prefix + key},
			"sk": &types.AttributeValueMemberS{Value: "IDEM"},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.log.Take()
	return out.Item
}

func numOf(t *testing.T, item map[string]types.AttributeValue, name string) int64 {
	t.Helper()
	nv, ok := item[name].(*types.AttributeValueMemberN)
	if !ok {
		t.Fatalf("attribute %s: %#v", name, item[name])
	}
	x, err := strconv.ParseInt(nv.Value, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// plain converts an item to Go values for comparison.
func plain(t *testing.T, item map[string]types.AttributeValue) map[string]any {
	t.Helper()
	var m map[string]any
	if err := attributevalue.UnmarshalMap(item, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestClaimFreshAndReplayAreOneRequest(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	key := storageKey()
	before := time.Now().UnixMilli()
	rec := mustClaim(t, e.store, claimReq(key, "A"), storekit.Claimed)
	wantOps(t, e, "PutItem")
	if rec.Key != key || rec.Status != storekit.StatusInProgress || rec.Nonce != "A" || rec.Attempt != 1 ||
		rec.PayloadHash != "ph" || rec.StartedAt < before || rec.HeartbeatAt != rec.StartedAt ||
		rec.ExpiresAt != rec.StartedAt+time.Minute.Milliseconds() || rec.CompletedAt != 0 {
		t.Fatalf("claimed record %+v", rec)
	}
	got, err := e.store.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	wantOps(t, e, "GetItem")
	if fmt.Sprint(got) != fmt.Sprint(rec) {
		t.Fatalf("get %+v, want %+v", got, rec)
	}

	// In progress: another claim gets the record from the refused condition.
	ex := mustClaim(t, e.store, claimReq(key, "B"), storekit.Existing)
	wantOps(t, e, "PutItem")
	if fmt.Sprint(ex) != fmt.Sprint(rec) {
		t.Fatalf("existing %+v, want %+v", ex, rec)
	}

	if err := e.store.Complete(ctx, key, "A", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte(`{"id":1}`), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	wantOps(t, e, "UpdateItem")

	// Completed: a replay is one request and carries the result.
	ex = mustClaim(t, e.store, claimReq(key, "C"), storekit.Existing)
	wantOps(t, e, "PutItem")
	if ex.Status != storekit.StatusCompleted || string(ex.Result) != `{"id":1}` || ex.Nonce != "A" ||
		ex.Attempt != 1 || ex.CompletedAt == 0 || ex.Error != nil {
		t.Fatalf("replayed record %+v", ex)
	}
	if ex.ExpiresAt < ex.CompletedAt+time.Hour.Milliseconds() {
		t.Fatalf("expires_at %d, completed_at %d", ex.ExpiresAt, ex.CompletedAt)
	}
	item := rawItem(t, e, key)
	if ttl, exp := numOf(t, item, "ttl"), numOf(t, item, "expires_at"); ttl < exp/1000+60 || ttl > exp/1000+61 {
		t.Fatalf("ttl %d for expires_at %d: want expires_at/1000 + the default 1 minute retention", ttl, exp)
	}
}

func TestClaimRetryWithSameNonceIsClaimed(t *testing.T) {
	e := newEnv(t)
	key := storageKey()
	first := mustClaim(t, e.store, claimReq(key, "A"), storekit.Claimed)
	again := mustClaim(t, e.store, claimReq(key, "A"), storekit.Claimed)
	if again.Attempt != 1 || again.StartedAt != first.StartedAt || again.Nonce != "A" {
		t.Fatalf("retried claim %+v, first %+v", again, first)
	}
}

func TestTakeoverIncrementsAttemptAndFencesOldOwner(t *testing.T) {
	clock := newFakeClock()
	e := newEnv(t, dynamostore.WithClock(clock.Now))
	ctx := context.Background()
	key := storageKey()
	mustClaim(t, e.store, claimReq(key, "A"), storekit.Claimed)

	clock.Advance(9 * time.Second)
	mustClaim(t, e.store, claimReq(key, "B"), storekit.Existing) // heartbeat not stale yet
	other := claimReq(key, "X")
	other.PayloadHash = "other"
	clock.Advance(2 * time.Second)
	mustClaim(t, e.store, other, storekit.Existing) // stale, but another payload
	e.log.Take()

	rec := mustClaim(t, e.store, claimReq(key, "B"), storekit.TookOver)
	wantOps(t, e, "PutItem", "UpdateItem") // refused with the stale record, then taken over
	now := clock.Now().UnixMilli()
	if rec.Nonce != "B" || rec.Attempt != 2 || rec.StartedAt != now || rec.HeartbeatAt != now ||
		rec.ExpiresAt != now+time.Minute.Milliseconds() || rec.Status != storekit.StatusInProgress {
		t.Fatalf("took over %+v", rec)
	}
	if got, err := e.store.Get(ctx, key); err != nil || fmt.Sprint(got) != fmt.Sprint(rec) {
		t.Fatalf("get %+v, %v; want %+v", got, err, rec)
	}

	// The old owner is fenced off everywhere.
	if err := e.store.Heartbeat(ctx, key, "A", time.Minute); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Fatalf("heartbeat by old owner: %v", err)
	}
	if err := e.store.Complete(ctx, key, "A", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("x"), TTL: time.Hour}); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Fatalf("complete by old owner: %v", err)
	}
	if err := e.store.Release(ctx, key, "A"); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Fatalf("release by old owner: %v", err)
	}
	if got, _ := e.store.Get(ctx, key); got.Nonce != "B" || got.Status != storekit.StatusInProgress {
		t.Fatalf("record after fenced writes %+v", got)
	}

	// Another takeover: 2 -> 3.
	clock.Advance(11 * time.Second)
	if rec := mustClaim(t, e.store, claimReq(key, "C"), storekit.TookOver); rec.Attempt != 3 {
		t.Fatalf("second takeover attempt %d", rec.Attempt)
	}
}

func TestTakeoverKeepsALaterExpiry(t *testing.T) {
	clock := newFakeClock()
	e := newEnv(t, dynamostore.WithClock(clock.Now))
	key := storageKey()
	long := claimReq(key, "A")
	long.LeaseTTL = 10 * time.Minute
	first := mustClaim(t, e.store, long, storekit.Claimed)
	clock.Advance(11 * time.Second)
	e.log.Take()
	rec := mustClaim(t, e.store, claimReq(key, "B"), storekit.TookOver)
	wantOps(t, e, "PutItem", "UpdateItem") // refused with the stale record, then the compare-and-swap
	if rec.ExpiresAt != first.ExpiresAt || rec.Attempt != 2 || rec.Nonce != "B" || rec.HeartbeatAt != clock.Now().UnixMilli() {
		t.Fatalf("took over %+v, first %+v", rec, first)
	}
}

func TestReclaimAfterExpiryIncrementsAttempt(t *testing.T) {
	clock := newFakeClock()
	e := newEnv(t, dynamostore.WithClock(clock.Now))
	ctx := context.Background()
	key := storageKey()
	mustClaim(t, e.store, claimReq(key, "A"), storekit.Claimed)
	if err := e.store.Complete(ctx, key, "A", storekit.Completion{
		Status: storekit.StatusFailed, Error: &storekit.RecordedFailure{Message: "boom", Type: "*errors.errorString"}, Result: []byte("r"), TTL: time.Second,
	}); err != nil {
		t.Fatal(err)
	}
	rec, err := e.store.Get(ctx, key)
	if err != nil || rec.Status != storekit.StatusFailed || rec.Error == nil || *rec.Error != (storekit.RecordedFailure{Message: "boom", Type: "*errors.errorString"}) {
		t.Fatalf("failed record %+v, %v", rec, err)
	}
	clock.Advance(time.Second)
	if _, err := e.store.Get(ctx, key); !errors.Is(err, storekit.ErrNotFound) {
		t.Fatalf("get after expiry: %v", err)
	}
	e.log.Take()
	rec = mustClaim(t, e.store, claimReq(key, "B"), storekit.Claimed)
	wantOps(t, e, "PutItem", "UpdateItem") // refused with the expired record, then re-claimed
	if rec.Attempt != 2 || rec.Result != nil || rec.Error != nil || rec.CompletedAt != 0 {
		t.Fatalf("re-claimed %+v", rec)
	}
	got, err := e.store.Get(ctx, key)
	if err != nil || fmt.Sprint(got) != fmt.Sprint(rec) {
		t.Fatalf("get %+v, %v; want %+v", got, err, rec)
	}
	item := rawItem(t, e, key)
	for _, gone := range []string{"result", "error_message", "error_type", "completed_at"} {
		if _, ok := item[gone]; ok {
			t.Errorf("attribute %s survived the re-claim", gone)
		}
	}
}

func TestReleaseMakesClaimableAndKeepsAttempt(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	key := storageKey()
	mustClaim(t, e.store, claimReq(key, "A"), storekit.Claimed)
	if err := e.store.Release(ctx, key, "B"); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Fatalf("release with another nonce: %v", err)
	}
	e.log.Take()
	if err := e.store.Release(ctx, key, "A"); err != nil {
		t.Fatal(err)
	}
	wantOps(t, e, "UpdateItem")
	if err := e.store.Release(ctx, key, "A"); err != nil { // a retried release
		t.Fatalf("second release: %v", err)
	}
	time.Sleep(2 * time.Millisecond) // expires_at = release time; "now" must pass it
	if _, err := e.store.Get(ctx, key); !errors.Is(err, storekit.ErrNotFound) {
		t.Fatalf("get after release: %v", err)
	}
	if rec := mustClaim(t, e.store, claimReq(key, "B"), storekit.Claimed); rec.Attempt != 2 {
		t.Fatalf("attempt after release %d", rec.Attempt)
	}
	// A completed record cannot be released.
	if err := e.store.Complete(ctx, key, "B", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Release(ctx, key, "B"); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Fatalf("release of a completed record: %v", err)
	}
}

func TestHeartbeat(t *testing.T) {
	clock := newFakeClock()
	e := newEnv(t, dynamostore.WithClock(clock.Now))
	ctx := context.Background()
	key := storageKey()
	mustClaim(t, e.store, claimReq(key, "A"), storekit.Claimed)
	clock.Advance(40 * time.Second)
	e.log.Take()
	if err := e.store.Heartbeat(ctx, key, "A", time.Minute); err != nil {
		t.Fatal(err)
	}
	wantOps(t, e, "UpdateItem")
	now := clock.Now().UnixMilli()
	rec, err := e.store.Get(ctx, key)
	if err != nil || rec.HeartbeatAt != now || rec.ExpiresAt != now+time.Minute.Milliseconds() {
		t.Fatalf("after heartbeat %+v, %v", rec, err)
	}
	// A shorter lease keeps the later expiry (a second, heartbeat-only write).
	clock.Advance(time.Second)
	e.log.Take()
	if err := e.store.Heartbeat(ctx, key, "A", time.Second); err != nil {
		t.Fatal(err)
	}
	wantOps(t, e, "UpdateItem", "UpdateItem")
	got, err := e.store.Get(ctx, key)
	if err != nil || got.HeartbeatAt != clock.Now().UnixMilli() || got.ExpiresAt != rec.ExpiresAt {
		t.Fatalf("after short heartbeat %+v, %v", got, err)
	}
	// Someone else's nonce, a missing record, a completed record: refused.
	if err := e.store.Heartbeat(ctx, key, "B", time.Minute); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Fatalf("heartbeat with another nonce: %v", err)
	}
	if err := e.store.Heartbeat(ctx, storageKey(), "A", time.Minute); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Fatalf("heartbeat on a missing record: %v", err)
	}
	if err := e.store.Complete(ctx, key, "A", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Heartbeat(ctx, key, "A", time.Minute); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Fatalf("heartbeat on a completed record: %v", err)
	}
}

func TestCompleteVariants(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cases := []struct {
		name string
		c    storekit.Completion
	}{
		{"result", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("hello"), TTL: time.Hour}},
		{"empty result", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte{}, TTL: time.Hour}},
		{"no result", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Hour}},
		{"unavailable", storekit.Completion{Status: storekit.StatusCompleted, Error: &storekit.RecordedFailure{Message: "cannot encode", Type: storekit.ResultUnavailableType}, TTL: time.Hour}},
		{"failed", storekit.Completion{Status: storekit.StatusFailed, Error: &storekit.RecordedFailure{Message: "card declined"}, TTL: time.Hour}},
		{"failed empty message", storekit.Completion{Status: storekit.StatusFailed, Error: &storekit.RecordedFailure{}, TTL: time.Hour}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			key := storageKey()
			mustClaim(t, e.store, claimReq(key, "A"), storekit.Claimed)
			for range 2 { // the second is a retried complete finding its own write
				if err := e.store.Complete(ctx, key, "A", tc.c); err != nil {
					t.Fatal(err)
				}
			}
			rec := mustClaim(t, e.store, claimReq(key, "B"), storekit.Existing)
			if rec.Status != tc.c.Status || (rec.Result == nil) != (tc.c.Result == nil) || string(rec.Result) != string(tc.c.Result) {
				t.Fatalf("record %+v", rec)
			}
			if (rec.Error == nil) != (tc.c.Error == nil) || (rec.Error != nil && *rec.Error != *tc.c.Error) {
				t.Fatalf("error %+v, want %+v", rec.Error, tc.c.Error)
			}
			if err := e.store.Complete(ctx, key, "B", tc.c); !errors.Is(err, storekit.ErrLostOwnership) {
				t.Fatalf("complete with another nonce: %v", err)
			}
		})
	}
	t.Run("invalid", func(t *testing.T) {
		key := storageKey()
		mustClaim(t, e.store, claimReq(key, "A"), storekit.Claimed)
		for _, c := range []storekit.Completion{{Status: storekit.StatusInProgress}, {Status: "bogus"}, {Status: storekit.StatusFailed}} {
			err := e.store.Complete(ctx, key, "A", c)
			var re *storekit.RequestError
			if !errors.As(err, &re) || !errors.Is(err, storekit.ErrInvalidRequest) {
				t.Fatalf("complete %+v: %v, want a *storekit.RequestError", c, err)
			}
		}
		if rec, err := e.store.Get(ctx, key); err != nil || rec.Status != storekit.StatusInProgress {
			t.Fatalf("record after invalid completions %+v, %v", rec, err)
		}
	})
	t.Run("missing record", func(t *testing.T) {
		err := e.store.Complete(ctx, storageKey(), "A", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Hour})
		if !errors.Is(err, storekit.ErrLostOwnership) {
			t.Fatalf("complete of a missing record: %v", err)
		}
	})
}

func TestDelete(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	key := storageKey()
	if err := e.store.Delete(ctx, key); err != nil {
		t.Fatalf("delete missing: %v", err)
	}
	mustClaim(t, e.store, claimReq(key, "A"), storekit.Claimed)
	e.log.Take()
	if err := e.store.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	wantOps(t, e, "DeleteItem")
	if _, err := e.store.Get(ctx, key); !errors.Is(err, storekit.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	if rec := mustClaim(t, e.store, claimReq(key, "B"), storekit.Claimed); rec.Attempt != 1 {
		t.Fatalf("attempt after delete %d", rec.Attempt)
	}
}

func TestConcurrentClaimsOneWinner(t *testing.T) {
	e := newEnv(t)
	for range 5 {
		key := storageKey()
		var wg sync.WaitGroup
		var mu sync.Mutex
		outcomes := map[storekit.ClaimOutcome]int{}
		var winner string
		start := make(chan struct{})
		for i := range 24 {
			wg.Go(func() {
				<-start
				nonce := fmt.Sprint("n", i)
				res, err := e.store.Claim(context.Background(), claimReq(key, nonce))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					t.Error(err)
					return
				}
				outcomes[res.Outcome]++
				if res.Outcome == storekit.Claimed {
					winner = nonce
				}
				if res.Record.Attempt != 1 {
					t.Errorf("attempt %d", res.Record.Attempt)
				}
			})
		}
		close(start)
		wg.Wait()
		if outcomes[storekit.Claimed] != 1 || outcomes[storekit.Existing] != 23 {
			t.Fatalf("outcomes %v", outcomes)
		}
		if rec, err := e.store.Get(context.Background(), key); err != nil || rec.Nonce != winner {
			t.Fatalf("record %+v, %v; winner %s", rec, err, winner)
		}
	}
}

func TestConcurrentTakeoversOneWinner(t *testing.T) {
	// One-request takeovers, and compare-and-swap takeovers that keep a
	// later expiry.
	for _, lease := range []time.Duration{time.Minute, 10 * time.Minute} {
		t.Run(lease.String(), func(t *testing.T) { concurrentTakeovers(t, lease) })
	}
}

func concurrentTakeovers(t *testing.T, firstLease time.Duration) {
	clock := newFakeClock()
	e := newEnv(t, dynamostore.WithClock(clock.Now))
	key := storageKey()
	first := claimReq(key, "A")
	first.LeaseTTL = firstLease
	firstRec := mustClaim(t, e.store, first, storekit.Claimed)
	clock.Advance(time.Minute - time.Millisecond) // stale, still live
	var wg sync.WaitGroup
	var took, existing int
	var mu sync.Mutex
	for i := range 16 {
		wg.Go(func() {
			res, err := e.store.Claim(context.Background(), claimReq(key, fmt.Sprint("t", i)))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err != nil:
				t.Error(err)
			case res.Outcome == storekit.TookOver:
				took++
			case res.Outcome == storekit.Existing && res.Record.Attempt == 2:
				existing++
			default:
				t.Errorf("outcome %v record %+v", res.Outcome, res.Record)
			}
		})
	}
	wg.Wait()
	if took != 1 || existing != 15 {
		t.Fatalf("took over %d, existing %d", took, existing)
	}
	rec, err := e.store.Get(context.Background(), key)
	if want := max(firstRec.ExpiresAt, clock.Now().Add(time.Minute).UnixMilli()); err != nil || rec.ExpiresAt != want || rec.Attempt != 2 {
		t.Fatalf("record %+v, %v; want expiry %d", rec, err, want)
	}
}

// goodCompletedItem returns the attributes (all but the keys) of a valid
// completed record, expiring in an hour.
func goodCompletedItem() map[string]types.AttributeValue {
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	exp := strconv.FormatInt(time.Now().Add(time.Hour).UnixMilli(), 10)
	return map[string]types.AttributeValue{
		"record_version": &types.AttributeValueMemberN{Value: "1"},
		"status":         &types.AttributeValueMemberS{Value: "completed"},
		"nonce":          &types.AttributeValueMemberS{Value: "A"},
		"payload_hash":   &types.AttributeValueMemberS{Value: "ph"},
		"attempt":        &types.AttributeValueMemberN{Value: "1"},
		"started_at":     &types.AttributeValueMemberN{Value: now},
		"heartbeat_at":   &types.AttributeValueMemberN{Value: now},
		"completed_at":   &types.AttributeValueMemberN{Value: now},
		"expires_at":     &types.AttributeValueMemberN{Value: exp},
		"result":         &types.AttributeValueMemberB{Value: []byte("r")},
	}
}

func TestCorruptRecords(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	good := goodCompletedItem
	cases := map[string]func(map[string]types.AttributeValue){
		"valid":           func(map[string]types.AttributeValue) {},
		"missing status":  func(m map[string]types.AttributeValue) { delete(m, "status") },
		"missing version": func(m map[string]types.AttributeValue) { delete(m, "record_version") },
		"future version": func(m map[string]types.AttributeValue) {
			m["record_version"] = &types.AttributeValueMemberN{Value: "2"}
		},
		"unknown status":    func(m map[string]types.AttributeValue) { m["status"] = &types.AttributeValueMemberS{Value: "done"} },
		"attempt as string": func(m map[string]types.AttributeValue) { m["attempt"] = &types.AttributeValueMemberS{Value: "1"} },
		"attempt zero":      func(m map[string]types.AttributeValue) { m["attempt"] = &types.AttributeValueMemberN{Value: "0"} },
		"fractional time":   func(m map[string]types.AttributeValue) { m["started_at"] = &types.AttributeValueMemberN{Value: "1.5"} },
		"huge number": func(m map[string]types.AttributeValue) {
			m["heartbeat_at"] = &types.AttributeValueMemberN{Value: "1e40"}
		},
		"result as string":     func(m map[string]types.AttributeValue) { m["result"] = &types.AttributeValueMemberS{Value: "r"} },
		"empty nonce":          func(m map[string]types.AttributeValue) { m["nonce"] = &types.AttributeValueMemberS{Value: ""} },
		"missing payload hash": func(m map[string]types.AttributeValue) { delete(m, "payload_hash") },
		"expires as bool": func(m map[string]types.AttributeValue) {
			m["expires_at"] = &types.AttributeValueMemberBOOL{Value: true}
		},
		"error type no message": func(m map[string]types.AttributeValue) { m["error_type"] = &types.AttributeValueMemberS{Value: "x"} },
		"error message as map": func(m map[string]types.AttributeValue) {
			m["error_message"] = &types.AttributeValueMemberM{Value: map[string]types.AttributeValue{}}
		},
		"failed without error": func(m map[string]types.AttributeValue) { m["status"] = &types.AttributeValueMemberS{Value: "failed"} },
		"owner as number":      func(m map[string]types.AttributeValue) { m["owner"] = &types.AttributeValueMemberN{Value: "1"} },
		"expired, attempt as string": func(m map[string]types.AttributeValue) {
			m["expires_at"] = &types.AttributeValueMemberN{Value: "1"}
			m["attempt"] = &types.AttributeValueMemberS{Value: "1"}
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			key := storageKey()
			item := good()
			mutate(item)
			item["pk"] = &types.AttributeValueMemberS{Value: e.prefix + key}
			item["sk"] = &types.AttributeValueMemberS{Value: "IDEM"}
			if _, err := e.client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(testTable), Item: item}); err != nil {
				t.Fatal(err)
			}
			_, getErr := e.store.Get(ctx, key)
			_, claimErr := e.store.Claim(ctx, claimReq(key, "B"))
			if name == "valid" {
				if getErr != nil || claimErr != nil {
					t.Fatalf("valid record: get %v, claim %v", getErr, claimErr)
				}
				return
			}
			for op, err := range map[string]error{"get": getErr, "claim": claimErr} {
				var ce *storekit.CorruptRecordError
				if !errors.Is(err, storekit.ErrCorruptRecord) || !errors.As(err, &ce) || ce.Key != key {
					t.Errorf("%s: %v, want a *CorruptRecordError for %s", op, err, key)
				}
			}
			// The claim did not overwrite it, and Delete removes it.
			if after, before := plain(t, rawItem(t, e, key)), plain(t, item); !reflect.DeepEqual(after, before) {
				t.Errorf("corrupt item changed:\n%v\n%v", after, before)
			}
			if err := e.store.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
			mustClaim(t, e.store, claimReq(key, "C"), storekit.Claimed)
		})
	}
}

// A live, stale in-progress item that this encoding cannot read (a later
// record_version, a nonce or start time of the wrong type) is not taken
// over: the claim reports it as corrupt and leaves it as it is.
func TestTakeoverRefusesACorruptItem(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	cases := map[string]func(map[string]types.AttributeValue){
		"future version": func(m map[string]types.AttributeValue) {
			m["record_version"] = &types.AttributeValueMemberN{Value: "2"}
		},
		"missing started":   func(m map[string]types.AttributeValue) { delete(m, "started_at") },
		"nonce as number":   func(m map[string]types.AttributeValue) { m["nonce"] = &types.AttributeValueMemberN{Value: "5"} },
		"attempt as string": func(m map[string]types.AttributeValue) { m["attempt"] = &types.AttributeValueMemberS{Value: "1"} },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			key := storageKey()
			stale := strconv.FormatInt(time.Now().Add(-time.Hour).UnixMilli(), 10)
			exp := strconv.FormatInt(time.Now().Add(30*time.Second).UnixMilli(), 10)
			item := map[string]types.AttributeValue{
				"pk":             &types.AttributeValueMemberS{Value: e.prefix + key},
				"sk":             &types.AttributeValueMemberS{Value: "IDEM"},
				"record_version": &types.AttributeValueMemberN{Value: "1"},
				"status":         &types.AttributeValueMemberS{Value: "in_progress"},
				"nonce":          &types.AttributeValueMemberS{Value: "A"},
				"payload_hash":   &types.AttributeValueMemberS{Value: "ph"},
				"attempt":        &types.AttributeValueMemberN{Value: "1"},
				"started_at":     &types.AttributeValueMemberN{Value: stale},
				"heartbeat_at":   &types.AttributeValueMemberN{Value: stale},
				"expires_at":     &types.AttributeValueMemberN{Value: exp},
			}
			mutate(item)
			if _, err := e.client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(testTable), Item: item}); err != nil {
				t.Fatal(err)
			}
			res, err := e.store.Claim(ctx, claimReq(key, "B"))
			if !errors.Is(err, storekit.ErrCorruptRecord) {
				t.Fatalf("claim: %v, %v; want a corrupt record", res.Outcome, err)
			}
			if after, before := plain(t, rawItem(t, e, key)), plain(t, item); !reflect.DeepEqual(after, before) {
				t.Errorf("corrupt item changed:\n%v\n%v", after, before)
			}
		})
	}
}

func TestClaimOverwritesAnExpiredOddRecord(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	key := storageKey()
	// Expired, with a fractional expiry: the claim's condition accepts it
	// (as a number it is in the past) and rewrites every field.
	item := map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: e.prefix + key}, "sk": &types.AttributeValueMemberS{Value: "IDEM"},
		"expires_at": &types.AttributeValueMemberN{Value: "1.5"}, "attempt": &types.AttributeValueMemberN{Value: "4"},
	}
	if _, err := e.client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(testTable), Item: item}); err != nil {
		t.Fatal(err)
	}
	rec := mustClaim(t, e.store, claimReq(key, "A"), storekit.Claimed)
	if rec.Attempt != 5 {
		t.Fatalf("attempt %d", rec.Attempt)
	}
	if got, err := e.store.Get(ctx, key); err != nil || fmt.Sprint(got) != fmt.Sprint(rec) {
		t.Fatalf("get %+v, %v; want %+v", got, err, rec)
	}
}

func TestSharesTableWithOtherItems(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	key := storageKey()
	// isr items under the same partition key value, other sort keys.
	for _, sk := range []string{"META", "LOCK", "REQ#abc"} {
		if _, err := e.client.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(testTable), Item: map[string]types.AttributeValue{
			"pk":     &types.AttributeValueMemberS{Value: e.prefix + key},
			"sk":     &types.AttributeValueMemberS{Value: sk},
			"status": &types.AttributeValueMemberS{Value: "STARTED"},
			"ttl":    &types.AttributeValueMemberN{Value: "1"},
		}}); err != nil {
			t.Fatal(err)
		}
	}
	mustClaim(t, e.store, claimReq(key, "A"), storekit.Claimed)
	if err := e.store.Complete(ctx, key, "A", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("r"), TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	out, err := e.client.Query(ctx, &dynamodb.QueryInput{
		TableName: aws.String(testTable), ConsistentRead: aws.Bool(true),
		KeyConditionExpression:    aws.String("pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": &types.AttributeValueMemberS{Value: e.prefix + key}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Items) != 3 {
		t.Fatalf("%d items left under the partition key, want the 3 isr items", len(out.Items))
	}
	for _, it := range out.Items {
		if it["status"].(*types.AttributeValueMemberS).Value != "STARTED" || len(it) != 4 {
			t.Fatalf("isr item changed: %v", it)
		}
	}

	// A custom sort key value keeps two stores on one partition apart.
	other := mustNew(t, e.client, testTable, dynamostore.WithKeyPrefix(e.prefix), dynamostore.WithSortKeyValue("IDEM#2"))
	mustClaim(t, e.store, claimReq(key, "A"), storekit.Claimed)
	mustClaim(t, other, claimReq(key, "B"), storekit.Claimed)
}

func TestCustomKeySchemas(t *testing.T) {
	endpoint := newEnv(t).endpoint
	c := newClient(clientConfig{endpoint: endpoint})
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts []dynamostore.Option
	}{
		{"upper", []dynamostore.Option{dynamostore.WithKeyAttributes("PK", "SK"), dynamostore.WithSortKeyValue("IDEMPOTENCY")}},
		{"hash only", []dynamostore.Option{dynamostore.WithKeyAttributes("id", "")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			table := "idem_schema_" + randHex(4)
			t.Cleanup(func() {
				_, _ = c.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(table)})
			})
			for range 2 { // idempotent
				if err := dynamostore.CreateTable(ctx, c, table, tc.opts...); err != nil {
					t.Fatal(err)
				}
			}
			ttl, err := c.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
			if err != nil || aws.ToString(ttl.TimeToLiveDescription.AttributeName) != "ttl" ||
				ttl.TimeToLiveDescription.TimeToLiveStatus != types.TimeToLiveStatusEnabled {
				t.Fatalf("ttl %+v, %v", ttl.TimeToLiveDescription, err)
			}
			if err := dynamostore.CreateTable(ctx, c, table); !errors.Is(err, dynamostore.ErrTableMismatch) {
				t.Fatalf("create with another schema: %v", err)
			}
			s := mustNew(t, c, table, tc.opts...)
			key := storageKey()
			mustClaim(t, s, claimReq(key, "A"), storekit.Claimed)
			mustClaim(t, s, claimReq(key, "B"), storekit.Existing)
			if err := s.Complete(ctx, key, "A", storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("r"), TTL: time.Hour}); err != nil {
				t.Fatal(err)
			}
			if rec, err := s.Get(ctx, key); err != nil || string(rec.Result) != "r" {
				t.Fatalf("get %+v, %v", rec, err)
			}
			if err := s.Delete(ctx, key); err != nil {
				t.Fatal(err)
			}
			// A store with the default schema cannot use this table.
			if _, err := mustNew(t, c, table).Claim(ctx, claimReq(key, "A")); err == nil {
				t.Fatal("claim with the wrong key schema succeeded")
			}
		})
	}
}

func TestInvalidConfiguration(t *testing.T) {
	e := newEnv(t)
	cases := map[string]func() (*dynamostore.Store, error){
		"nil client":  func() (*dynamostore.Store, error) { return dynamostore.New(nil, testTable) },
		"empty table": func() (*dynamostore.Store, error) { return dynamostore.New(e.client, "") },
		"nil option":  func() (*dynamostore.Store, error) { return dynamostore.New(e.client, testTable, nil) },
		"empty pk": func() (*dynamostore.Store, error) {
			return dynamostore.New(e.client, testTable, dynamostore.WithKeyAttributes("", "sk"))
		},
		"same pk and sk": func() (*dynamostore.Store, error) {
			return dynamostore.New(e.client, testTable, dynamostore.WithKeyAttributes("k", "k"))
		},
		"pk is attribute": func() (*dynamostore.Store, error) {
			return dynamostore.New(e.client, testTable, dynamostore.WithKeyAttributes("status", "sk"))
		},
		"sk is attribute": func() (*dynamostore.Store, error) {
			return dynamostore.New(e.client, testTable, dynamostore.WithKeyAttributes("pk", "ttl"))
		},
		"empty sk value": func() (*dynamostore.Store, error) {
			return dynamostore.New(e.client, testTable, dynamostore.WithSortKeyValue(""))
		},
		"negative retention": func() (*dynamostore.Store, error) {
			return dynamostore.New(e.client, testTable, dynamostore.WithRetention(-time.Second))
		},
		"nil clock": func() (*dynamostore.Store, error) {
			return dynamostore.New(e.client, testTable, dynamostore.WithClock(nil))
		},
		"prefix too long": func() (*dynamostore.Store, error) {
			return dynamostore.New(e.client, testTable, dynamostore.WithKeyPrefix(string(make([]byte, 2048))))
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := mk()
			var oe *storekit.OptionError
			if s != nil || !errors.Is(err, storekit.ErrInvalidOption) || !errors.As(err, &oe) {
				t.Fatalf("New = %v, %v", s, err)
			}
		})
	}
	var zero *dynamostore.Store
	if err := zero.Validate(); !errors.Is(err, storekit.ErrInvalidOption) {
		t.Fatalf("nil store: %v", err)
	}
	_, err := dynamostore.New(nil, "", dynamostore.WithRetention(-1), nil, dynamostore.WithClock(nil))
	storetest.CheckOptionErrors(t, err, "dynamostore.New", "dynamostore.New", "dynamostore.WithRetention", "dynamostore.New", "dynamostore.WithClock")
	if want := "idem: dynamostore.WithRetention: retention must not be negative, got -1ns"; !strings.Contains(err.Error(), want) {
		t.Errorf("got %q, want it to contain %q", err, want)
	}
	err = dynamostore.CreateTable(context.Background(), nil, "", nil)
	storetest.CheckOptionErrors(t, err, "dynamostore.CreateTable", "dynamostore.CreateTable", "dynamostore.CreateTable")
	if _, err := (&dynamostore.Store{}).Get(context.Background(), storageKey()); !errors.Is(err, storekit.ErrInvalidOption) {
		t.Errorf("zero Store: got %v, want an error matching storekit.ErrInvalidOption", err)
	}
}

// TestInvalidRequests: calls no Guard makes are refused with storekit's
// typed errors before any request is sent.
func TestInvalidRequests(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	key := storageKey()
	for name, r := range map[string]storekit.ClaimRequest{
		"empty nonce":    {Key: key, LeaseTTL: time.Minute, TakeoverAfter: time.Second},
		"zero takeover":  {Key: key, Nonce: "n", LeaseTTL: time.Minute},
		"sub-ms lease":   {Key: key, Nonce: "n", LeaseTTL: time.Microsecond, TakeoverAfter: time.Second},
		"negative lease": {Key: key, Nonce: "n", LeaseTTL: -time.Second, TakeoverAfter: time.Second},
	} {
		_, err := e.store.Claim(ctx, r)
		var re *storekit.RequestError
		if !errors.Is(err, storekit.ErrInvalidRequest) || !errors.As(err, &re) {
			t.Errorf("claim, %s: %v, want a *storekit.RequestError", name, err)
		}
	}
	for name, c := range map[string]storekit.Completion{
		"unknown status":        {Status: "done", TTL: time.Minute},
		"in progress":           {Status: storekit.StatusInProgress, TTL: time.Minute},
		"failure without error": {Status: storekit.StatusFailed, TTL: time.Minute},
		"zero TTL":              {Status: storekit.StatusCompleted, Result: []byte("1")},
		"sub-ms TTL":            {Status: storekit.StatusCompleted, TTL: time.Microsecond},
	} {
		if err := e.store.Complete(ctx, key, "n", c); !errors.Is(err, storekit.ErrInvalidRequest) {
			t.Errorf("complete, %s: %v, want ErrInvalidRequest", name, err)
		}
	}
	ok := storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Minute}
	for op, err := range map[string]error{
		"heartbeat": e.store.Heartbeat(ctx, key, "", time.Minute),
		"complete":  e.store.Complete(ctx, key, "", ok),
		"release":   e.store.Release(ctx, key, ""),
	} {
		if !errors.Is(err, storekit.ErrLostOwnership) {
			t.Errorf("%s with an empty nonce: %v, want ErrLostOwnership", op, err)
		}
	}
	long := "idem:" + string(make([]byte, 2100))
	for op, err := range map[string]error{
		"claim, empty key": func() error { _, err := e.store.Claim(ctx, claimReq("", "A")); return err }(),
		"claim, long key":  func() error { _, err := e.store.Claim(ctx, claimReq(long, "A")); return err }(),
		"heartbeat":        e.store.Heartbeat(ctx, "", "A", time.Minute),
		"complete":         e.store.Complete(ctx, "", "A", ok),
		"release":          e.store.Release(ctx, "", "A"),
		"get":              func() error { _, err := e.store.Get(ctx, ""); return err }(),
		"get, long key":    func() error { _, err := e.store.Get(ctx, long); return err }(),
		"delete":           e.store.Delete(ctx, ""),
	} {
		var ke *storekit.KeyError
		if !errors.Is(err, storekit.ErrInvalidKey) || !errors.As(err, &ke) {
			t.Errorf("%s: %v, want a *storekit.KeyError", op, err)
		}
	}
	if got := e.log.Take(); len(got) != 0 {
		t.Fatalf("invalid requests were sent: %v", got)
	}
}

func TestBackendErrorsAreWrapped(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	missing := mustNew(t, e.client, "idem_no_such_table_"+randHex(4))
	_, err := missing.Claim(ctx, claimReq(storageKey(), "A"))
	var se *storekit.StoreError
	var rnf *types.ResourceNotFoundException
	if !errors.As(err, &se) || se.Op != "claim" || !errors.As(err, &rnf) {
		t.Fatalf("claim on a missing table: %v", err)
	}
	if errors.Is(err, storekit.ErrLostOwnership) || errors.Is(err, storekit.ErrNotFound) {
		t.Fatalf("a backend error matched a store sentinel: %v", err)
	}

	// Nothing listens: a network error, wrapped, after the SDK's retries.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	dead := mustNew(t, newClient(clientConfig{endpoint: "http://" + addr, maxRetries: 1}), testTable)
	for op, err := range map[string]error{
		"claim":     func() error { _, err := dead.Claim(ctx, claimReq(storageKey(), "A")); return err }(),
		"heartbeat": dead.Heartbeat(ctx, storageKey(), "A", time.Minute),
		"complete":  dead.Complete(ctx, storageKey(), "A", storekit.Completion{Status: storekit.StatusCompleted, TTL: time.Minute}),
		"release":   dead.Release(ctx, storageKey(), "A"),
		"get":       func() error { _, err := dead.Get(ctx, storageKey()); return err }(),
		"delete":    dead.Delete(ctx, storageKey()),
	} {
		var se *storekit.StoreError
		var ne net.Error
		if !errors.As(err, &se) || se.Op != op || !errors.As(err, &ne) {
			t.Errorf("%s against a closed port: %v", op, err)
		}
		if errors.Is(err, storekit.ErrLostOwnership) {
			t.Errorf("%s: a network error matched ErrLostOwnership", op)
		}
	}
}

// A result over DynamoDB's item size limit is a permanent failure: the
// Guard reports it at once instead of retrying.
func TestOversizeResultIsPermanent(t *testing.T) {
	e := newEnv(t)
	key := storageKey()
	mustClaim(t, e.store, claimReq(key, "A"), storekit.Claimed)
	err := e.store.Complete(context.Background(), key, "A", storekit.Completion{
		Status: storekit.StatusCompleted, Result: make([]byte, 500<<10), TTL: time.Hour})
	if !errors.Is(err, storekit.ErrPermanent) {
		t.Fatalf("oversize complete: %v, want ErrPermanent", err)
	}
}

// TestStoredTakeover: a claim keeps its owner's takeover threshold, and a
// later caller with a shorter one cannot take it over before the stored
// threshold has passed, also after a heartbeat.
func TestStoredTakeover(t *testing.T) {
	clock := newFakeClock()
	e := newEnv(t, dynamostore.WithClock(clock.Now))
	ctx := context.Background()
	key := storageKey()
	owner := claimReq(key, "A")
	owner.TakeoverAfter = time.Hour
	owner.LeaseTTL = 3 * time.Hour
	rec := mustClaim(t, e.store, owner, storekit.Claimed)
	if rec.TakeoverMs != time.Hour.Milliseconds() {
		t.Fatalf("claimed record TakeoverMs = %d", rec.TakeoverMs)
	}
	got, err := e.store.Get(ctx, key)
	if err != nil || got.TakeoverMs != time.Hour.Milliseconds() {
		t.Fatalf("Get = %+v, %v", got, err)
	}
	other := claimReq(key, "B")
	other.TakeoverAfter = time.Second
	other.LeaseTTL = 5 * time.Hour // a later expiry: the single conditional request decides
	clock.Advance(time.Minute)
	mustClaim(t, e.store, other, storekit.Existing)
	clock.Advance(50 * time.Minute)
	if err := e.store.Heartbeat(ctx, key, "A", 3*time.Hour); err != nil {
		t.Fatal(err)
	}
	clock.Advance(50 * time.Minute) // 100 min after the claim, 50 after the heartbeat
	mustClaim(t, e.store, other, storekit.Existing)
	clock.Advance(11 * time.Minute)
	rec = mustClaim(t, e.store, other, storekit.TookOver)
	if rec.TakeoverMs != time.Second.Milliseconds() {
		t.Fatalf("took over with TakeoverMs = %d, want the new owner's", rec.TakeoverMs)
	}
}
