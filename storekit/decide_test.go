package storekit_test

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"
)

func claimReq(nonce, payload string) storekit.ClaimRequest {
	return storekit.ClaimRequest{Key: "idem:k", Nonce: nonce, PayloadHash: payload, LeaseTTL: 10 * time.Second, TakeoverAfter: time.Second}
}

func TestDecideClaim(t *testing.T) {
	const now = 1_000_000
	live := &storekit.Record{Key: "idem:k", Status: storekit.StatusInProgress, PayloadHash: "p", Nonce: "n1", Attempt: 3,
		StartedAt: now - 100, HeartbeatAt: now - 100, ExpiresAt: now + 5000, TakeoverMs: 1000}
	stale := live.Clone()
	stale.HeartbeatAt = now - 1000
	expired := live.Clone()
	expired.ExpiresAt = now
	done := live.Clone()
	done.Status, done.HeartbeatAt = storekit.StatusCompleted, now-5000
	for _, tc := range []struct {
		name    string
		cur     *storekit.Record
		req     storekit.ClaimRequest
		out     storekit.ClaimOutcome
		write   bool
		attempt int64
		nonce   string
	}{
		{"none", nil, claimReq("n2", "p"), storekit.Claimed, true, 1, "n2"},
		{"expired", expired, claimReq("n2", "x"), storekit.Claimed, true, 4, "n2"},
		{"retry", live, claimReq("n1", "p"), storekit.Claimed, false, 3, "n1"},
		{"live", live, claimReq("n2", "p"), storekit.Existing, false, 3, "n1"},
		{"stale", stale, claimReq("n2", "p"), storekit.TookOver, true, 4, "n2"},
		{"stale other payload", stale, claimReq("n2", "q"), storekit.Existing, false, 3, "n1"},
		{"completed", done, claimReq("n2", "p"), storekit.Existing, false, 3, "n1"},
	} {
		before := tc.cur.Clone()
		d := storekit.DecideClaim(tc.cur, tc.req, now)
		if d.Outcome != tc.out || d.Write != tc.write || d.Record.Attempt != tc.attempt || d.Record.Nonce != tc.nonce {
			t.Errorf("%s: got %v write=%v attempt=%d nonce=%s", tc.name, d.Outcome, d.Write, d.Record.Attempt, d.Record.Nonce)
		}
		if !d.Write && d.Record != tc.cur {
			t.Errorf("%s: nothing to write, but the record returned is not the current one", tc.name)
		}
		if d.Write && d.Record.TakeoverMs != tc.req.TakeoverAfter.Milliseconds() {
			t.Errorf("%s: TakeoverMs %d not stored", tc.name, d.Record.TakeoverMs)
		}
		if tc.cur != nil && !reflect.DeepEqual(tc.cur, before) {
			t.Errorf("%s: DecideClaim modified the current record", tc.name)
		}
		if r := d.Result(); r.Outcome != d.Outcome || r.Record != d.Record {
			t.Errorf("%s: Result differs from the decision", tc.name)
		}
	}
}

func TestApply(t *testing.T) {
	const now = 1_000_000
	rec := &storekit.Record{Key: "idem:k", Status: storekit.StatusInProgress, Nonce: "n", Attempt: 1, ExpiresAt: now + 10}
	if _, err := storekit.ApplyHeartbeat(rec, "", time.Second, now); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Errorf("heartbeat with an empty nonce: %v", err)
	}
	next, err := storekit.ApplyHeartbeat(rec, "n", time.Second, now)
	if err != nil || next.HeartbeatAt != now || next.ExpiresAt != now+1000 || next == rec {
		t.Errorf("heartbeat: %+v, %v", next, err)
	}
	expired := rec.Clone()
	expired.ExpiresAt = now
	if _, err := storekit.ApplyHeartbeat(expired, "n", time.Second, now); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Errorf("heartbeat of an expired claim: %v", err)
	}
	c := storekit.Completion{Status: storekit.StatusCompleted, Result: []byte("1"), TTL: time.Minute}
	if _, err := storekit.ApplyComplete(rec, "other", c, now); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Errorf("complete by another nonce: %v", err)
	}
	for _, bad := range []storekit.Completion{
		{Status: storekit.StatusInProgress, TTL: time.Minute},
		{Status: storekit.StatusFailed, TTL: time.Minute},
		{Status: storekit.StatusCompleted},
	} {
		if _, err := storekit.ApplyComplete(rec, "n", bad, now); !errors.Is(err, storekit.ErrInvalidRequest) {
			t.Errorf("complete %+v: %v, want ErrInvalidRequest", bad, err)
		}
	}
	done, err := storekit.ApplyComplete(rec, "n", c, now)
	if err != nil || done.Status != storekit.StatusCompleted || done.ExpiresAt != now+60_000 || done.CompletedAt != now {
		t.Errorf("complete: %+v, %v", done, err)
	}
	if _, err := storekit.ApplyComplete(done, "n", c, now+1); err != nil {
		t.Errorf("a retried complete: %v", err)
	}
	if _, err := storekit.ApplyRelease(done, "n", now); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Errorf("release of a completed record: %v", err)
	}
	rel, err := storekit.ApplyRelease(rec, "n", now)
	if err != nil || rel.ExpiresAt != now || rel.Attempt != 1 {
		t.Errorf("release: %+v, %v", rel, err)
	}
}

func TestValidate(t *testing.T) {
	good := claimReq("n", "")
	if err := storekit.ValidateClaim(good); err != nil {
		t.Fatal(err)
	}
	for name, mod := range map[string]func(*storekit.ClaimRequest){
		"nonce":    func(r *storekit.ClaimRequest) { r.Nonce = "" },
		"lease":    func(r *storekit.ClaimRequest) { r.LeaseTTL = 0 },
		"takeover": func(r *storekit.ClaimRequest) { r.TakeoverAfter = time.Microsecond },
	} {
		r := good
		mod(&r)
		err := storekit.ValidateClaim(r)
		var re *storekit.RequestError
		if !errors.Is(err, storekit.ErrInvalidRequest) || !errors.As(err, &re) {
			t.Errorf("%s: %v", name, err)
		}
	}
	r := good
	r.Key = ""
	if err := storekit.ValidateClaim(r); !errors.Is(err, storekit.ErrInvalidKey) {
		t.Errorf("empty key: %v", err)
	}
	if err := storekit.ValidateOwner("idem:k", ""); !errors.Is(err, storekit.ErrLostOwnership) {
		t.Errorf("empty nonce: %v", err)
	}
	if _, err := storekit.Found(&storekit.Record{ExpiresAt: 5}, 5); !errors.Is(err, storekit.ErrNotFound) {
		t.Errorf("expired record found: %v", err)
	}
	if _, err := storekit.Found(nil, 5); !errors.Is(err, storekit.ErrNotFound) {
		t.Errorf("missing record found: %v", err)
	}
}

func TestOwnerFormat(t *testing.T) {
	if got := storekit.FormatOwner("", "inc", "tok"); got != "tok" {
		t.Fatalf("storekit.FormatOwner without instance = %q", got)
	}
	o := storekit.FormatOwner("pod-1", "aaaa", "tok")
	if o != "pod-1/aaaa/tok" || storekit.OwnerToken(o) != "tok" || storekit.OwnerToken("tok") != "tok" || storekit.OwnerToken("pod-1/aaaa/") != "" {
		t.Fatalf("owner %q, token %q", o, storekit.OwnerToken(o))
	}
	inst, inc := storekit.OwnerPrefixes(o)
	if inst != "pod-1/" || inc != "pod-1/aaaa/" {
		t.Fatalf("prefixes %q %q", inst, inc)
	}
	if a, b := storekit.OwnerPrefixes("tok"); a != "" || b != "" {
		t.Fatalf("prefixes of a bare token: %q %q", a, b)
	}
	for _, c := range []struct {
		cur, req string
		want     bool
	}{
		{"pod-1/old/t1", "pod-1/new/t2", true},
		{"pod-1/new/t1", "pod-1/new/t2", false}, // same incarnation: alive
		{"pod-2/old/t1", "pod-1/new/t2", false}, // another instance
		{"t1", "pod-1/new/t2", false},
		{"pod-1/old/t1", "t2", false},
		{"pod-10/old/t1", "pod-1/new/t2", false},
	} {
		if got := storekit.EarlierIncarnation(c.cur, c.req); got != c.want {
			t.Errorf("storekit.EarlierIncarnation(%q, %q) = %v", c.cur, c.req, got)
		}
	}
	now := int64(1000)
	cur := &storekit.Record{Key: "k", Status: storekit.StatusInProgress, Nonce: "n1", Attempt: 1, HeartbeatAt: now, ExpiresAt: now + 60000, Owner: "pod-1/old/"}
	req := storekit.ClaimRequest{Key: "k", Nonce: "n2", LeaseTTL: time.Minute, TakeoverAfter: 30 * time.Second, Owner: "pod-1/new/"}
	if d := storekit.DecideClaim(cur, req, now); d.Outcome != storekit.TookOver || !d.OwnerGone || d.Record.Attempt != 2 || d.Record.Owner != req.Owner {
		t.Fatalf("an earlier incarnation's live claim: %+v", d)
	}
	req.Owner = "pod-2/new/"
	if d := storekit.DecideClaim(cur, req, now); d.Outcome != storekit.Existing {
		t.Fatalf("another instance's live claim: %+v", d)
	}
}
