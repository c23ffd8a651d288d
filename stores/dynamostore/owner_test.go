package dynamostore_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/dynamostore"
)

// ownerReq is claimReq with an owner.
func ownerReq(key, nonce, owner string) storekit.ClaimRequest {
	r := claimReq(key, nonce)
	r.Owner = owner
	return r
}

// claimResult claims and fails the test on an error or another outcome.
func claimResult(t *testing.T, s storekit.Store, req storekit.ClaimRequest, want storekit.ClaimOutcome) storekit.ClaimResult {
	t.Helper()
	res, err := s.Claim(context.Background(), req)
	if err != nil {
		t.Fatalf("claim %s (owner %q): %v", req.Nonce, req.Owner, err)
	}
	if res.Outcome != want {
		t.Fatalf("claim %s (owner %q): outcome %v, want %v (record %+v)", req.Nonce, req.Owner, res.Outcome, want, res.Record)
	}
	return res
}

// wantTakenFromGone checks a takeover of a live claim whose owner was
// gone: attempt, owner and nonce of the result and of the stored item.
func wantTakenFromGone(t *testing.T, e *env, res storekit.ClaimResult, req storekit.ClaimRequest, attempt int64) {
	t.Helper()
	if !res.OwnerGone || res.Record.Attempt != attempt || res.Record.Owner != req.Owner || res.Record.Nonce != req.Nonce {
		t.Fatalf("takeover: OwnerGone %v, record %+v; want OwnerGone, attempt %d, owner %q", res.OwnerGone, res.Record, attempt, req.Owner)
	}
	if got := rawItem(t, e, req.Key)["owner"]; !attrIs(got, req.Owner) {
		t.Fatalf("stored owner %#v, want %q", got, req.Owner)
	}
	rec, err := e.store.Get(context.Background(), req.Key)
	if err != nil || rec.Owner != req.Owner || rec.Nonce != req.Nonce || rec.Attempt != attempt {
		t.Fatalf("get after takeover: %+v, %v", rec, err)
	}
}

func attrIs(av types.AttributeValue, s string) bool {
	sv, ok := av.(*types.AttributeValueMemberS)
	return ok && sv.Value == s
}

// TestOwnerEarlierIncarnation: a claim stores its owner; a live
// in-progress claim (not stale: threshold 10s) is taken over at once by a
// claim of another incarnation of its owner's instance ("inst/old/" by
// "inst/new/"), as a takeover of a gone owner (OwnerGone, attempt 2), in
// the two requests of any takeover; never by another instance, a bare
// owner, no owner or its own owner, which see it in one request.
func TestOwnerEarlierIncarnation(t *testing.T) {
	e := newEnv(t)
	key := storageKey()
	claimResult(t, e.store, ownerReq(key, "A", "inst/old/"), storekit.Claimed)
	if got := rawItem(t, e, key)["owner"]; !attrIs(got, "inst/old/") {
		t.Fatalf("stored owner %#v", got)
	}
	e.log.Take()
	for _, r := range []storekit.ClaimRequest{
		ownerReq(key, "B", "other/new/"), ownerReq(key, "C", "tok"),
		ownerReq(key, "D", ""), ownerReq(key, "E", "inst/old/"),
		ownerReq(key, "F", "insta/new/"), // a longer instance name is another instance
	} {
		res := claimResult(t, e.store, r, storekit.Existing)
		if res.OwnerGone || res.Record.Nonce != "A" || res.Record.Owner != "inst/old/" {
			t.Fatalf("owner %q: %+v, OwnerGone %v", r.Owner, res.Record, res.OwnerGone)
		}
		wantOps(t, e, "PutItem")
	}
	req := ownerReq(key, "G", "inst/new/")
	res := claimResult(t, e.store, req, storekit.TookOver)
	wantOps(t, e, "PutItem", "UpdateItem")
	wantTakenFromGone(t, e, res, req, 2)
}

// TestOwnerUpdateCondition: a claim that goes straight to the update (a
// key this store released, claimed since by another store with owner
// "inst/old/") is decided by the update's condition alone: it takes the
// claim over for "inst/new/" (OwnerGone, attempt 3) and refuses it to
// "other/new/", in one request each.
func TestOwnerUpdateCondition(t *testing.T) {
	e := newEnv(t)
	other := mustNew(t, e.client, testTable, dynamostore.WithKeyPrefix(e.prefix))
	for _, tc := range []struct {
		owner string
		want  storekit.ClaimOutcome
	}{{"other/new/", storekit.Existing}, {"inst/new/", storekit.TookOver}} {
		key := storageKey()
		claimResult(t, e.store, ownerReq(key, "A", ""), storekit.Claimed)
		if err := e.store.Release(context.Background(), key, "A"); err != nil {
			t.Fatal(err)
		}
		claimResult(t, other, ownerReq(key, "B", "inst/old/"), storekit.Claimed)
		e.log.Take()
		req := ownerReq(key, "C", tc.owner)
		res := claimResult(t, e.store, req, tc.want)
		wantOps(t, e, "UpdateItem")
		if tc.want == storekit.Existing {
			if res.OwnerGone || res.Record.Nonce != "B" {
				t.Fatalf("another instance: %+v, OwnerGone %v", res.Record, res.OwnerGone)
			}
			continue
		}
		wantTakenFromGone(t, e, res, req, 3)
	}
}

// TestOwnerTakeoverKeepsExpiry: a gone owner's claim whose expiry is later
// than the new claim's lease is taken over keeping that expiry (the
// compare-and-swap path), still as a takeover of a gone owner.
func TestOwnerTakeoverKeepsExpiry(t *testing.T) {
	e := newEnv(t)
	key := storageKey()
	first := ownerReq(key, "A", "inst/old/")
	first.LeaseTTL = time.Hour
	old := claimResult(t, e.store, first, storekit.Claimed).Record
	claimResult(t, e.store, ownerReq(key, "B", "other/new/"), storekit.Existing)
	e.log.Take()
	req := ownerReq(key, "C", "inst/new/")
	res := claimResult(t, e.store, req, storekit.TookOver)
	wantOps(t, e, "PutItem", "UpdateItem")
	wantTakenFromGone(t, e, res, req, 2)
	if res.Record.ExpiresAt != old.ExpiresAt {
		t.Fatalf("expiry %d, want the old claim's %d", res.Record.ExpiresAt, old.ExpiresAt)
	}
}

// TestOwnerStaleTakeover: a stale claim is taken over as a stale one
// (OwnerGone false) whoever claims it, on both paths (the PutItem's
// refusal decided in Go, and the update's condition after a release
// here); the new owner replaces the old one, and a claim without an owner
// removes it.
func TestOwnerStaleTakeover(t *testing.T) {
	clock := newFakeClock()
	e := newEnv(t, dynamostore.WithClock(clock.Now))
	for i, owner := range []string{"other/new/", "inst/new/", ""} {
		key := storageKey()
		if i == 2 {
			claimResult(t, e.store, ownerReq(key, "X", ""), storekit.Claimed)
			if err := e.store.Release(context.Background(), key, "X"); err != nil {
				t.Fatal(err)
			}
		}
		claimResult(t, e.store, ownerReq(key, "A", "inst/old/"), storekit.Claimed)
		clock.Advance(11 * time.Second) // claimReq's threshold is 10s
		res := claimResult(t, e.store, ownerReq(key, "B", owner), storekit.TookOver)
		if res.OwnerGone || res.Record.Owner != owner {
			t.Fatalf("owner %q: stale takeover with OwnerGone %v, record %+v", owner, res.OwnerGone, res.Record)
		}
		if got, ok := rawItem(t, e, key)["owner"]; owner == "" && ok || owner != "" && !attrIs(got, owner) {
			t.Fatalf("owner %q: stored %#v", owner, got)
		}
	}
}

// TestOwnerOptional: a claim without an owner stores none (as items
// written before owners were stored), reads back as "", and is never
// taken over before its threshold (an owner that is not a string is a
// corrupt item: TestCorruptRecords).
func TestOwnerOptional(t *testing.T) {
	e := newEnv(t)
	key := storageKey()
	claimResult(t, e.store, ownerReq(key, "A", ""), storekit.Claimed)
	if _, ok := rawItem(t, e, key)["owner"]; ok {
		t.Fatal("a claim without an owner stored one")
	}
	rec, err := e.store.Get(context.Background(), key)
	if err != nil || rec.Owner != "" {
		t.Fatalf("get: %+v, %v", rec, err)
	}
	claimResult(t, e.store, ownerReq(key, "B", "inst/new/"), storekit.Existing)

}
