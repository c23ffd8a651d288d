package integration

import (
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/anishathalye/porcupine"
)

// hop is a hand-written operation for the model's own tests: client c
// called in at call and had out at ret (milliseconds since the start).
func hop(c int, call, ret int64, in linInput, out linOutput) porcupine.Operation {
	in.Key = "k"
	in.NowLo = call - clockSlack
	out.NowHi = ret + clockSlack
	return porcupine.Operation{ClientId: c, Input: in, Output: out,
		Call: call * int64(time.Millisecond), Return: ret * int64(time.Millisecond)}
}

func claimIn(nonce string, takeover time.Duration) linInput {
	return linInput{Op: opClaim, Nonce: nonce, Payload: "a", TakeoverMs: takeover.Milliseconds()}
}

func claimOut(o storekit.ClaimOutcome, nonce string, attempt int64, st storekit.Status, result string) linOutput {
	return linOutput{Outcome: o, Rec: view{Status: st, Nonce: nonce, Attempt: attempt, Payload: "a", Result: result}}
}

func ownerIn(op opKind, nonce string) linInput { return linInput{Op: op, Nonce: nonce} }

func completeIn(nonce, result string) linInput {
	return linInput{Op: opComplete, Nonce: nonce, Status: storekit.StatusCompleted, Result: result}
}

var (
	okOut   = linOutput{}
	lostOut = linOutput{Err: errLost}
)

func getOut(nonce string, attempt int64, st storekit.Status, result string) linOutput {
	return linOutput{Rec: view{Status: st, Nonce: nonce, Attempt: attempt, Payload: "a", Result: result}}
}

const long = historyLease

var purge = linInput{Op: opPurge}

// cleaning marks ops as a history of a store that removes records expired
// past retentionMs.
func cleaning(retentionMs int64, ops ...porcupine.Operation) []porcupine.Operation {
	for i := range ops {
		in := ops[i].Input.(linInput)
		in.Cleans, in.RetentionMs = true, retentionMs
		ops[i].Input = in
	}
	return ops
}

// A modelCase is a hand-written history and whether the model must accept it.
type modelCase struct {
	name  string
	legal bool
	ops   []porcupine.Operation
}

// TestModel checks the model on hand-written histories: legal ones are
// accepted, and each mechanism of non-linearizability seen in the stores
// (and the time bounds of takeovers) is rejected.
func TestModel(t *testing.T) {
	var cases []modelCase
	cases = append(cases, modelOwnershipCases()...)
	cases = append(cases, modelTimeBoundCases()...)
	cases = append(cases, modelCleaningCases()...)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := porcupine.CheckOperationsTimeout(storeModel, tc.ops, 10*time.Second)
			if want := map[bool]porcupine.CheckResult{true: porcupine.Ok, false: porcupine.Illegal}[tc.legal]; res != want {
				t.Fatalf("porcupine says %s, want %s:\n%s", res, want, formatKeyHistory(tc.ops, "k"))
			}
		})
	}
}

// modelOwnershipCases are a call's life, and completions, heartbeats,
// releases and takeovers racing each other.
func modelOwnershipCases() []modelCase {
	ip, done := storekit.StatusInProgress, storekit.StatusCompleted
	get := ownerIn(opGet, "")
	return []modelCase{
		{"a call's life", true, []porcupine.Operation{
			hop(0, 0, 1, claimIn("n1", long), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(1, 2, 3, claimIn("n2", long), claimOut(storekit.Existing, "n1", 1, ip, "")),
			hop(0, 2, 3, ownerIn(opHeartbeat, "n1"), okOut),
			hop(0, 4, 5, completeIn("n1", "r"), okOut),
			hop(1, 6, 7, claimIn("n1", long), claimOut(storekit.Claimed, "n1", 1, done, "r")),
			hop(1, 8, 9, claimIn("n3", long), claimOut(storekit.Existing, "n1", 1, done, "r")),
			hop(1, 10, 11, get, getOut("n1", 1, done, "r")),
			hop(1, 12, 13, ownerIn(opDelete, ""), okOut),
			hop(1, 14, 15, claimIn("n4", long), claimOut(storekit.Claimed, "n4", 1, ip, "")),
		}},
		{"a retried claim of a completed record answered Existing (Redis claim.lua)", false, []porcupine.Operation{
			hop(0, 0, 1, claimIn("n1", long), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(0, 2, 3, completeIn("n1", "r"), okOut),
			hop(1, 4, 5, claimIn("n1", long), claimOut(storekit.Existing, "n1", 1, done, "r")),
		}},
		{"a complete that wrote nothing reported ok (MySQL UPDATE then SELECT)", false, []porcupine.Operation{
			hop(0, 0, 10, claimIn("n1", long), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(1, 1, 5, completeIn("n1", "r"), okOut),
			hop(1, 6, 7, get, getOut("n1", 1, ip, "")),
		}},
		{"a heartbeat racing a release revives the claim (now read before the lock)", false, []porcupine.Operation{
			hop(0, 0, 1, claimIn("n1", long), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(0, 10, 20, ownerIn(opRelease, "n1"), okOut),
			hop(1, 5, 25, ownerIn(opHeartbeat, "n1"), okOut),
			hop(1, 30, 31, get, getOut("n1", 1, ip, "")),
		}},
		{"the heartbeat lands first: legal", true, []porcupine.Operation{
			hop(0, 0, 1, claimIn("n1", long), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(0, 10, 20, ownerIn(opRelease, "n1"), okOut),
			hop(1, 5, 25, ownerIn(opHeartbeat, "n1"), okOut),
			hop(1, 30, 31, get, linOutput{Err: errNotFound}),
		}},
		{"a claim after a release answers took_over (PostgreSQL EXCLUDED.started_at)", false, []porcupine.Operation{
			hop(0, 0, 1, claimIn("n1", time.Millisecond), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(0, 10, 11, ownerIn(opRelease, "n1"), okOut),
			hop(1, 20, 21, claimIn("n2", long), claimOut(storekit.TookOver, "n2", 2, ip, "")),
		}},
		{"a claim after a release: claimed, attempt goes on", true, []porcupine.Operation{
			hop(0, 0, 1, claimIn("n1", time.Millisecond), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(0, 10, 11, ownerIn(opRelease, "n1"), okOut),
			hop(1, 20, 21, claimIn("n2", long), claimOut(storekit.Claimed, "n2", 2, ip, "")),
			hop(0, 22, 23, ownerIn(opHeartbeat, "n1"), lostOut),
			hop(0, 24, 25, completeIn("n1", "r"), lostOut),
		}},
		{"a takeover before the threshold passed", false, []porcupine.Operation{
			hop(0, 0, 1, claimIn("n1", 40*time.Millisecond), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(1, 10, 11, claimIn("n2", long), claimOut(storekit.TookOver, "n2", 2, ip, "")),
		}},
		{"a takeover after the threshold passed", true, []porcupine.Operation{
			hop(0, 0, 1, claimIn("n1", 40*time.Millisecond), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(1, 50, 51, claimIn("n2", long), claimOut(storekit.TookOver, "n2", 2, ip, "")),
			hop(0, 52, 53, ownerIn(opHeartbeat, "n1"), lostOut),
			hop(1, 54, 55, completeIn("n2", "r"), okOut),
		}},
	}
}

// modelTimeBoundCases are the time bounds of a takeover: which operations
// bound a claim's now, and which threshold decides.
func modelTimeBoundCases() []modelCase {
	ip := storekit.StatusInProgress
	get := ownerIn(opGet, "")
	return []modelCase{
		{"a read between a claim's now and its write does not bound that now", true, []porcupine.Operation{
			hop(0, 0, 10, claimIn("n1", 10*time.Millisecond), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(1, 5, 6, get, linOutput{Err: errNotFound}),
			hop(1, 11, 11, claimIn("n2", long), claimOut(storekit.TookOver, "n2", 2, ip, "")),
		}},
		{"a delete that finds nothing does not bound a later claim's now", true, []porcupine.Operation{
			hop(0, 0, 20, claimIn("n1", 10*time.Millisecond), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(1, 5, 6, ownerIn(opDelete, ""), okOut),
			hop(2, 11, 11, claimIn("n2", long), claimOut(storekit.TookOver, "n2", 2, ip, "")),
		}},
		{"a write does bound the now of a later one", false, []porcupine.Operation{
			hop(0, 0, 1, claimIn("n1", long), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(0, 5, 6, ownerIn(opRelease, "n1"), okOut),
			// Attempt 2: after the release, so its now is at least 5.
			hop(1, 0, 10, claimIn("n2", 10*time.Millisecond), claimOut(storekit.Claimed, "n2", 2, ip, "")),
			hop(2, 11, 11, claimIn("n3", long), claimOut(storekit.TookOver, "n3", 3, ip, "")),
		}},
		{"a stale claim not taken over", false, []porcupine.Operation{
			hop(0, 0, 1, claimIn("n1", 40*time.Millisecond), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(1, 50, 51, claimIn("n2", long), claimOut(storekit.Existing, "n1", 1, ip, "")),
		}},
		{"the stored threshold, not the caller's, decides", false, []porcupine.Operation{
			hop(0, 0, 1, claimIn("n1", long), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(1, 50, 51, claimIn("n2", time.Millisecond), claimOut(storekit.TookOver, "n2", 2, ip, "")),
		}},
		{"a heartbeat keeps the claim fresh", true, []porcupine.Operation{
			hop(0, 0, 1, claimIn("n1", 40*time.Millisecond), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(0, 30, 31, ownerIn(opHeartbeat, "n1"), okOut),
			hop(1, 50, 51, claimIn("n2", long), claimOut(storekit.Existing, "n1", 1, ip, "")),
		}},
		{"another payload is never taken over", false, []porcupine.Operation{
			hop(0, 0, 1, claimIn("n1", time.Millisecond), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(1, 50, 51, linInput{Op: opClaim, Nonce: "n2", Payload: "b", TakeoverMs: 1},
				linOutput{Outcome: storekit.TookOver, Rec: view{Status: ip, Nonce: "n2", Attempt: 2, Payload: "a"}}),
		}},
		{"a completion by a stale nonce", false, []porcupine.Operation{
			hop(0, 0, 1, claimIn("n1", time.Millisecond), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(1, 10, 11, claimIn("n2", long), claimOut(storekit.TookOver, "n2", 2, ip, "")),
			hop(0, 12, 13, completeIn("n1", "r"), okOut),
		}},
		{"concurrent claims both claimed", false, []porcupine.Operation{
			hop(0, 0, 10, claimIn("n1", long), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(1, 0, 10, claimIn("n2", long), claimOut(storekit.Claimed, "n2", 1, ip, "")),
		}},
	}
}

// modelCleaningCases are histories of stores that remove released records
// past their retention.
func modelCleaningCases() []modelCase {
	ip := storekit.StatusInProgress
	get := ownerIn(opGet, "")
	return []modelCase{
		{"a released record cleaned up: the next claim starts at attempt 1", true, cleaning(0,
			hop(0, 0, 1, claimIn("n1", long), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(0, 2, 3, ownerIn(opRelease, "n1"), okOut),
			hop(2, 4, 9, purge, okOut),
			hop(0, 10, 11, completeIn("n1", "r"), lostOut),
			hop(1, 12, 13, claimIn("n2", long), claimOut(storekit.Claimed, "n2", 1, ip, "")),
		)},
		{"a store that does not clean keeps a released record", false, []porcupine.Operation{
			hop(0, 0, 1, claimIn("n1", long), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(0, 2, 3, ownerIn(opRelease, "n1"), okOut),
			hop(1, 12, 13, claimIn("n2", long), claimOut(storekit.Claimed, "n2", 1, ip, "")),
		}},
		{"a released record removed before its retention passed", false, cleaning(100,
			hop(0, 0, 1, claimIn("n1", long), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(0, 2, 3, ownerIn(opRelease, "n1"), okOut),
			hop(1, 50, 51, claimIn("n2", long), claimOut(storekit.Claimed, "n2", 1, ip, "")),
		)},
		{"a released record removed once its retention passed", true, cleaning(100,
			hop(0, 0, 1, claimIn("n1", long), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(0, 2, 3, ownerIn(opRelease, "n1"), okOut),
			hop(1, 101, 102, claimIn("n2", long), claimOut(storekit.Claimed, "n2", 1, ip, "")),
		)},
		{"a purge removes a claim that revived a released record (a stale reading)", false, cleaning(0,
			hop(0, 0, 1, claimIn("n1", long), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(0, 2, 3, ownerIn(opRelease, "n1"), okOut),
			hop(2, 4, 20, purge, linOutput{Removed: 1}),
			hop(1, 5, 6, claimIn("n2", long), claimOut(storekit.Claimed, "n2", 2, ip, "")),
			hop(1, 21, 22, ownerIn(opHeartbeat, "n2"), lostOut),
		)},
		{"the purge lands before the claim: legal", true, cleaning(0,
			hop(0, 0, 1, claimIn("n1", long), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(0, 2, 3, ownerIn(opRelease, "n1"), okOut),
			hop(2, 4, 20, purge, linOutput{Removed: 1}),
			hop(1, 5, 6, claimIn("n2", long), claimOut(storekit.Claimed, "n2", 1, ip, "")),
			hop(1, 21, 22, ownerIn(opHeartbeat, "n2"), okOut),
		)},
		{"a purge removes a completion of a released claim", false, cleaning(0,
			hop(0, 0, 1, claimIn("n1", long), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(0, 2, 3, ownerIn(opRelease, "n1"), okOut),
			hop(0, 4, 5, completeIn("n1", "r"), okOut),
			hop(2, 6, 7, purge, linOutput{Removed: 1}),
			hop(1, 8, 9, claimIn("n2", long), claimOut(storekit.Claimed, "n2", 1, ip, "")),
		)},
		{"a purge removes a live claim", false, cleaning(0,
			hop(0, 0, 1, claimIn("n1", long), claimOut(storekit.Claimed, "n1", 1, ip, "")),
			hop(2, 2, 3, purge, linOutput{Removed: 1}),
			hop(1, 4, 5, get, linOutput{Err: errNotFound}),
		)},
	}
}
