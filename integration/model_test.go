package integration

import (
	"fmt"
	"sort"
	"strings"

	"github.com/idem-go/idem/storekit"

	"github.com/anishathalye/porcupine"
)

// This file is a sequential model of the storekit.Store contract (store.go's
// doc on Claim, Heartbeat, Complete, Release, Get and Delete) for
// porcupine, one key at a time.
//
// Time. A store decides expiry and staleness with its own clock (its
// server's where it has one), which a history cannot observe. The model
// treats the store's now as a nondeterministic choice, bounded by the
// operation: an operation read a now between its call and its return (the
// test records both in Unix milliseconds on the same host as the servers,
// with clockSlack on either side for rounding), and a store's clock never
// runs backwards along the linearization: an operation linearized after a
// write reads a now no earlier than the write's call. Only writes bound
// later operations so: a store may answer a read (Get, a claim that finds a
// live record) without the key's lock, between the moment a write read its
// now and the moment it took effect, so a read linearized before a write
// says nothing about the write's now.
//
// The histories are built so that only staleness depends on time: leases
// and completion TTLs (historyLease) are far longer than a history, so a
// record stops being live only by Release, and Delete removes it. A claim
// that meets another nonce's live in_progress record with the same payload
// hash may then answer TookOver only if the heartbeat could be at least the
// stored threshold old at some now inside the claim's interval, and
// Existing only if it could be younger than the threshold. The model keeps
// the interval in which the record's heartbeat was set, so a takeover by a
// short threshold is accepted only when enough time can have passed, and a
// claim refused by a long one only when little can have.
//
// Clean-up. A store that cleans (Purge, a background pass, memstore's
// few records per write) may remove a record once it has expired past the
// store's retention: in a history, a released record (its ExpiresAt is
// the release's now). Clean-up runs at moments a history does not see
// (a background pass, a write on another key), so the model lets such a
// record vanish at any moment after it became eligible: an operation that
// could run at or after ExpiresAt + retention is judged against the kept
// record and, if that fails, against no record (a claim then starts again
// at attempt 1, a Complete by the released owner is refused). The
// histories of a cleaning store run with retention 0 and a client that
// calls Purge beside the others; each Purge appears in every key's
// history, where it changes nothing the model must resolve at once. What
// the model never allows is what a clean-up that deletes by a stale
// reading does: a live record (claimed, heartbeated, completed) that
// vanishes.

// opKind names a Store operation.
type opKind uint8

const (
	opClaim opKind = iota
	opHeartbeat
	opComplete
	opRelease
	opGet
	opDelete
	opPurge
)

func (k opKind) String() string {
	return [...]string{"claim", "heartbeat", "complete", "release", "get", "delete", "purge"}[k]
}

// errKind is the error an operation returned, as the contract names it.
type errKind uint8

const (
	errNone     errKind = iota
	errLost             // idem.ErrLostOwnership
	errNotFound         // storekit.ErrNotFound
)

func (e errKind) String() string {
	return [...]string{"ok", "lost", "not_found"}[e]
}

// linInput is one operation's input.
type linInput struct {
	Op    opKind
	Key   string
	Nonce string // claim, heartbeat, complete, release
	// Payload is the claim's payload hash.
	Payload string
	// TakeoverMs is the claim's takeover threshold.
	TakeoverMs int64
	// Status and Result are the completion's (Result is the completed
	// record's result, or the failed record's error message).
	Status storekit.Status
	Result string
	// NowLo is a lower bound on the store's now for this operation: the
	// call time in Unix ms, less clockSlack.
	NowLo int64
	// Cleans says the store removes records expired past RetentionMs
	// (see Clean-up above).
	Cleans      bool
	RetentionMs int64
}

// view is the part of a record the model checks.
type view struct {
	Status  storekit.Status
	Nonce   string
	Attempt int64
	Payload string
	Result  string
}

func (v view) String() string {
	s := fmt.Sprintf("%s#%d %s", v.Nonce, v.Attempt, v.Status)
	if v.Payload != "" {
		s += " p=" + v.Payload
	}
	if v.Result != "" {
		s += " r=" + v.Result
	}
	return s
}

// viewOf is the part of rec the model checks.
func viewOf(rec *storekit.Record) view {
	if rec == nil {
		return view{}
	}
	v := view{Status: rec.Status, Nonce: rec.Nonce, Attempt: rec.Attempt, Payload: rec.PayloadHash}
	switch {
	case rec.Status == storekit.StatusFailed && rec.Error != nil:
		v.Result = rec.Error.Message
	case rec.Result != nil:
		v.Result = string(rec.Result)
	}
	return v
}

// linOutput is one operation's output.
type linOutput struct {
	Err     errKind
	Outcome storekit.ClaimOutcome // claim
	Rec     view                  // claim, get
	// NowHi is an upper bound on the store's now for this operation: the
	// return time in Unix ms, plus clockSlack.
	NowHi int64
	// Removed is what a Purge returned: records of all keys, shown only.
	Removed int
}

// linState is the model's state of one key. It is a comparable value, so
// porcupine's default equality (==) applies.
type linState struct {
	Exists bool
	// Live is false once the record was released: nothing else ends a
	// record's life within a history (see historyLease).
	Live       bool
	Rec        view
	TakeoverMs int64
	// HbLo and HbHi bound the instant (store clock, Unix ms) the record's
	// heartbeat was last set.
	HbLo, HbHi int64
	// RelLo is a lower bound on a released record's ExpiresAt: the
	// release's NowLo.
	RelLo int64
	// Clock is a lower bound on the store's now: the call time of the
	// last write. No operation linearized later reads an earlier time.
	Clock int64
}

func (s linState) String() string {
	if !s.Exists {
		return "absent"
	}
	live := "live"
	if !s.Live {
		live = "released"
	}
	return fmt.Sprintf("%v %s T=%dms hb∈[%d,%d]", s.Rec, live, s.TakeoverMs, s.HbLo%100000, s.HbHi%100000)
}

// step is the contract applied to one operation: whether the store may
// answer out to in in state s, and the state after it. A record a
// clean-up may have removed by then is tried kept first (what the store
// answers then is also what it may answer later, when the record may
// still be removed), then gone.
func step(s linState, in linInput, out linOutput) (bool, linState) {
	ok, next := stepOn(s, in, out)
	if ok || !removable(s, in, out) {
		return ok, next
	}
	return stepOn(linState{Clock: s.Clock}, in, out)
}

// removable reports whether a clean-up may have removed s's record by the
// time of an operation that returned at out.NowHi: it is not live, and it
// can have expired past retention by then.
func removable(s linState, in linInput, out linOutput) bool {
	return in.Cleans && s.Exists && !s.Live && out.NowHi >= s.RelLo+in.RetentionMs
}

// stepOn is step with the record as s holds it.
func stepOn(s linState, in linInput, out linOutput) (bool, linState) {
	nowLo, nowHi := max(in.NowLo, s.Clock), out.NowHi
	if nowLo > nowHi {
		return false, s
	}
	next := s // a write sets next.Clock = nowLo
	owned := s.Exists && s.Rec.Nonce == in.Nonce
	switch in.Op {
	case opClaim:
		return stepClaim(s, in, out, nowLo, nowHi)
	case opHeartbeat:
		if owned && s.Live && s.Rec.Status == storekit.StatusInProgress {
			next.HbLo, next.HbHi = nowLo, nowHi
			next.Clock = nowLo
			return out.Err == errNone, next
		}
		return out.Err == errLost, next
	case opComplete:
		// Complete needs only the nonce: a released claim's owner may
		// still record its outcome, and a retried Complete succeeds.
		if owned {
			next.Live = true
			next.Rec.Status, next.Rec.Result = in.Status, in.Result
			next.Clock = nowLo
			return out.Err == errNone, next
		}
		return out.Err == errLost, next
	case opRelease:
		if owned && s.Rec.Status == storekit.StatusInProgress {
			next.Live = false
			next.Clock = nowLo
			next.RelLo = nowLo
			return out.Err == errNone, next
		}
		return out.Err == errLost, next
	case opGet:
		if s.Exists && s.Live {
			return out.Err == errNone && out.Rec == s.Rec, next
		}
		return out.Err == errNotFound, next
	case opDelete:
		if !s.Exists {
			// Nothing to remove: a read, which bounds no later now (a
			// store's DELETE need not wait for a claim that has read its
			// now and not yet made its record visible).
			return out.Err == errNone, next
		}
		return out.Err == errNone, linState{Clock: nowLo}
	case opPurge:
		// A removal it made is resolved by the next operation that sees
		// the key (step); a live record it must keep.
		return out.Err == errNone, next
	}
	return false, s
}

// stepClaim is step for a claim whose now lies in nowLo..nowHi.
func stepClaim(s linState, in linInput, out linOutput, nowLo, nowHi int64) (bool, linState) {
	next := s
	owned := s.Exists && s.Rec.Nonce == in.Nonce
	if out.Err != errNone {
		return false, s
	}
	if !s.Exists || !s.Live {
		return claimNew(s, in, out, nowLo, nowHi)
	}
	if owned {
		// A retried claim whose first try was applied.
		return out.Outcome == storekit.Claimed && out.Rec == s.Rec, next
	}
	if s.Rec.Status == storekit.StatusInProgress && s.Rec.Payload == in.Payload {
		return claimLive(s, in, out, nowLo, nowHi)
	}
	return out.Outcome == storekit.Existing && out.Rec == s.Rec, next
}

// claimNew is stepClaim when there is no live record.
func claimNew(s linState, in linInput, out linOutput, nowLo, nowHi int64) (bool, linState) {
	next := s
	// A new claim; attempts go on counting over a released record.
	attempt := int64(1)
	if s.Exists {
		attempt = s.Rec.Attempt + 1
	}
	want := view{Status: storekit.StatusInProgress, Nonce: in.Nonce, Attempt: attempt, Payload: in.Payload}
	if out.Outcome != storekit.Claimed || out.Rec != want {
		return false, s
	}
	next.Exists, next.Live, next.Rec = true, true, want
	next.TakeoverMs = in.TakeoverMs
	next.Clock = nowLo
	next.HbLo, next.HbHi = nowLo, nowHi
	return true, next
}

// claimLive is stepClaim on another caller's live claim of the same
// payload: taken over if it can be stale, Existing if it can be fresh.
func claimLive(s linState, in linInput, out linOutput, nowLo, nowHi int64) (bool, linState) {
	next := s
	canStale := nowHi-s.HbLo >= s.TakeoverMs
	canFresh := nowLo-s.HbHi < s.TakeoverMs
	switch {
	case out.Outcome == storekit.TookOver && canStale:
		want := s.Rec
		want.Nonce, want.Attempt = in.Nonce, s.Rec.Attempt+1
		if out.Rec != want {
			return false, s
		}
		next.Rec = want
		next.TakeoverMs = in.TakeoverMs
		next.HbLo, next.HbHi = max(nowLo, s.HbLo+s.TakeoverMs), nowHi
		next.Clock = next.HbLo
		return true, next
	case out.Outcome == storekit.Existing && canFresh:
		return out.Rec == s.Rec, next
	}
	return false, s
}

// storeModel is the porcupine model of the Store contract, partitioned by
// key.
var storeModel = porcupine.Model{
	Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
		byKey := map[string][]porcupine.Operation{}
		var keys []string
		for _, op := range history {
			k := op.Input.(linInput).Key
			if _, ok := byKey[k]; !ok {
				keys = append(keys, k)
			}
			byKey[k] = append(byKey[k], op)
		}
		sort.Strings(keys)
		parts := make([][]porcupine.Operation, 0, len(keys))
		for _, k := range keys {
			parts = append(parts, byKey[k])
		}
		return parts
	},
	Init: func() any { return linState{} },
	Step: func(state, input, output any) (bool, any) {
		return step(state.(linState), input.(linInput), output.(linOutput))
	},
	DescribeOperation: func(input, output any) string {
		return describe(input.(linInput), output.(linOutput))
	},
	DescribeState: func(state any) string { return state.(linState).String() },
}

// describe renders an operation and its answer.
func describe(in linInput, out linOutput) string {
	var b strings.Builder
	switch in.Op {
	case opClaim:
		fmt.Fprintf(&b, "claim(%s, p=%s, T=%dms)", in.Nonce, in.Payload, in.TakeoverMs)
	case opComplete:
		fmt.Fprintf(&b, "complete(%s, %s %s)", in.Nonce, in.Status, in.Result)
	case opGet, opDelete, opPurge:
		fmt.Fprintf(&b, "%s()", in.Op)
	default:
		fmt.Fprintf(&b, "%s(%s)", in.Op, in.Nonce)
	}
	b.WriteString(" → ")
	switch {
	case out.Err != errNone:
		b.WriteString(out.Err.String())
	case in.Op == opClaim:
		fmt.Fprintf(&b, "%s %v", out.Outcome, out.Rec)
	case in.Op == opGet:
		fmt.Fprintf(&b, "%v", out.Rec)
	case in.Op == opPurge:
		fmt.Fprintf(&b, "%d removed", out.Removed)
	default:
		b.WriteString("ok")
	}
	return b.String()
}
