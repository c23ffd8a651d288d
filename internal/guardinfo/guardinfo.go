// Package guardinfo lets the packages of this repository that build on
// idem (the HTTP, gRPC, message and MCP adapters, the CLI, the stores'
// tests) read how a Guard was configured, without making that part of
// package idem's API:
//
//	info, ok := guardinfo.Of(g) // g is an *idem.Guard[T]
//	if ok && info.Lock { ... }  // OnFailure(Lock)
package guardinfo

import (
	"errors"
	"time"

	"github.com/idem-go/idem/storekit"
)

// Info is how a Guard was configured.
type Info struct {
	Wait          bool          // OnDuplicate(Wait)
	Lock          bool          // OnFailure(Lock)
	TTL           time.Duration // how long a completed record is kept
	Heartbeat     time.Duration // how often an owner refreshes its claim
	TakeoverAfter time.Duration // heartbeat age at which a claim is stale
	Store         storekit.Store
	// StorageKey returns the storage key of a caller's key under the
	// Guard's namespace and active secret.
	StorageKey func(key string) (string, error)
}

// Of returns the Info of g, an *idem.Guard[T] of any T made by idem.New;
// false for anything else, a nil or a zero Guard. Package idem sets it
// when it is initialised, before any code that imports it runs.
var Of = func(g any) (Info, bool) { return Info{}, false }

// StorageKey returns the storage key of key under the Guard g.
func StorageKey(g any, key string) (string, error) {
	info, ok := Of(g)
	if !ok {
		return "", errors.New("guardinfo: not a Guard made by idem.New")
	}
	return info.StorageKey(key)
}
