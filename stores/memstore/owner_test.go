package memstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"
)

// TestOwnerEarlierIncarnation: a live in-progress claim (far from its
// threshold) made by owner "inst/old/" is taken over at once by a claim
// of another incarnation of the same instance ("inst/new/"), as a
// takeover of a gone owner; a claim of another instance, a bare owner or
// no owner finds it in progress.
func TestOwnerEarlierIncarnation(t *testing.T) {
	var s storekit.Store = newStore(t)
	ctx := context.Background()
	req := func(nonce, owner string) storekit.ClaimRequest {
		return storekit.ClaimRequest{Key: "idem:owner", Nonce: nonce, PayloadHash: "ph",
			LeaseTTL: time.Hour, TakeoverAfter: time.Hour, Owner: owner}
	}
	if res, err := s.Claim(ctx, req("A", "inst/old/")); err != nil || res.Outcome != storekit.Claimed {
		t.Fatalf("first claim: %+v, %v", res, err)
	}
	for i, owner := range []string{"other/new/", "tok", "", "insta/new/"} {
		res, err := s.Claim(ctx, req(string(rune('B'+i)), owner))
		if err != nil || res.Outcome != storekit.Existing || res.OwnerGone || res.Record.Nonce != "A" {
			t.Fatalf("owner %q: %+v, %v; want Existing", owner, res, err)
		}
	}
	res, err := s.Claim(ctx, req("N", "inst/new/"))
	if err != nil || res.Outcome != storekit.TookOver || !res.OwnerGone ||
		res.Record.Attempt != 2 || res.Record.Owner != "inst/new/" {
		t.Fatalf("earlier incarnation: %+v (record %+v), %v; want TookOver, OwnerGone, attempt 2", res, res.Record, err)
	}
	if rec, err := s.Get(ctx, "idem:owner"); err != nil || rec.Nonce != "N" || rec.Owner != "inst/new/" {
		t.Fatalf("get: %+v, %v", rec, err)
	}
}
