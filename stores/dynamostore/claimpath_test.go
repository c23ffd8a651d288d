package dynamostore_test

import (
	"context"
	"testing"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/stores/dynamostore"
)

// TestClaimPaths: which requests each claim sends. A key without a record
// is one PutItem, a live or completed one is that PutItem refused (ALL_OLD
// carries the record); a record that is expired, released or stale takes
// the PutItem and an UpdateItem, except a key this store released itself,
// whose next claim goes straight to the UpdateItem. That memory is a hint
// only: a stale hint still gets the right outcome in one request.
func TestClaimPaths(t *testing.T) {
	e := newEnv(t)
	other := mustNew(t, e.client, testTable, dynamostore.WithKeyPrefix(e.prefix))
	ctx := context.Background()

	key := storageKey()
	mustClaim(t, e.store, claimReq(key, "A"), storekit.Claimed)
	wantOps(t, e, "PutItem")
	mustClaim(t, e.store, claimReq(key, "B"), storekit.Existing)
	wantOps(t, e, "PutItem")

	// Released here: the retry is one UpdateItem and continues the attempts.
	if err := e.store.Release(ctx, key, "A"); err != nil {
		t.Fatal(err)
	}
	e.log.Take()
	if rec := mustClaim(t, e.store, claimReq(key, "C"), storekit.Claimed); rec.Attempt != 2 {
		t.Fatalf("re-claim after release: attempt %d", rec.Attempt)
	}
	wantOps(t, e, "UpdateItem")

	// Released by another store: this one does not know, so PutItem first.
	if err := e.store.Release(ctx, key, "C"); err != nil {
		t.Fatal(err)
	}
	key2 := storageKey()
	mustClaim(t, other, claimReq(key2, "A"), storekit.Claimed)
	if err := other.Release(ctx, key2, "A"); err != nil {
		t.Fatal(err)
	}
	e.log.Take()
	if rec := mustClaim(t, e.store, claimReq(key2, "B"), storekit.Claimed); rec.Attempt != 2 {
		t.Fatalf("re-claim of a record released elsewhere: attempt %d", rec.Attempt)
	}
	wantOps(t, e, "PutItem", "UpdateItem")

	// A stale hint: released here, then claimed by another store. The
	// update is refused and carries the live record.
	if rec := mustClaim(t, other, claimReq(key, "D"), storekit.Claimed); rec.Attempt != 3 {
		t.Fatalf("claim by the other store: attempt %d", rec.Attempt)
	}
	e.log.Take()
	if rec := mustClaim(t, e.store, claimReq(key, "E"), storekit.Existing); rec.Nonce != "D" {
		t.Fatalf("existing %+v", rec)
	}
	wantOps(t, e, "UpdateItem")

	// A stale hint on a deleted record: the update creates it.
	key3 := storageKey()
	mustClaim(t, e.store, claimReq(key3, "A"), storekit.Claimed)
	if err := e.store.Release(ctx, key3, "A"); err != nil {
		t.Fatal(err)
	}
	if err := other.Delete(ctx, key3); err != nil {
		t.Fatal(err)
	}
	e.log.Take()
	if rec := mustClaim(t, e.store, claimReq(key3, "B"), storekit.Claimed); rec.Attempt != 1 {
		t.Fatalf("claim after delete: attempt %d", rec.Attempt)
	}
	wantOps(t, e, "UpdateItem")
}
