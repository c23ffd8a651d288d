package storekit

import (
	"context"
	"strings"
)

// A claim's owner (ClaimRequest.Owner, Record.Owner) names the process that
// made it, in one of two forms:
//
//	token                         a process without an instance ID
//	instance/incarnation/token    a process started with an instance ID
//
// token is the store's Presence token ("" for a store without Presence);
// instance is the stable identity the user gave the process (it holds no
// '/'), and incarnation a random value the process drew when it started.
// A claim meets another process's in-progress record and takes it over at
// once when its owner is known gone: its token is gone by the backend's
// word (OwnerChecker), or it is an earlier incarnation of the claiming
// process's own instance (OwnerPrefixes).

// FormatOwner returns the owner of a claim: token alone when instance is
// empty, else instance/incarnation/token.
func FormatOwner(instance, incarnation, token string) string {
	if instance == "" {
		return token
	}
	return instance + "/" + incarnation + "/" + token
}

// OwnerToken returns the Presence token of owner: what follows its last
// '/', or all of it.
func OwnerToken(owner string) string {
	return owner[strings.LastIndexByte(owner, '/')+1:]
}

// OwnerPrefixes returns, for a claim made by owner, the prefixes of an
// earlier incarnation's owner: a record whose owner starts with instance
// but not with incarnation was left by an earlier incarnation of the
// claiming process's instance, and is dead. Both are "" when owner has no
// instance. A store whose claim runs in the backend (a script, a
// statement) checks these two prefixes there.
func OwnerPrefixes(owner string) (instance, incarnation string) {
	first := strings.IndexByte(owner, '/')
	last := strings.LastIndexByte(owner, '/')
	if first < 0 || first == last {
		return "", ""
	}
	return owner[:first+1], owner[:last+1]
}

// EarlierIncarnation reports whether cur, the owner of a record, is an
// earlier incarnation of the instance of req, the owner of a claim.
func EarlierIncarnation(cur, req string) bool {
	inst, inc := OwnerPrefixes(req)
	return inst != "" && strings.HasPrefix(cur, inst) && !strings.HasPrefix(cur, inc)
}

// Liveness is what an owner check says about the process that made a claim.
type Liveness int

// Liveness values.
const (
	LivenessUnknown Liveness = iota // the store cannot tell (no Presence, no token, a pooler)
	Alive                           // the owner's process holds its presence
	Gone                            // the owner's process is gone: its claims are taken over at once
)

// String returns "unknown", "alive" or "gone".
func (l Liveness) String() string {
	switch l {
	case Alive:
		return "alive"
	case Gone:
		return "gone"
	}
	return "unknown"
}

// LivenessChecker is implemented by stores with Presence, for operators'
// tools (idem ls, idem inspect): OwnerLiveness says whether the process
// named by owner (a Record.Owner) is alive, gone, or unknown, by the same
// check a claim makes, without claiming anything. It ignores the
// instance part of owner. An error is a failure to ask the backend.
type LivenessChecker interface {
	OwnerLiveness(ctx context.Context, owner string) (Liveness, error)
}
