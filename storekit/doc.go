// Package storekit is for authors of idem stores: the store contract
// (storekit.Store and the records and requests it speaks) and the parts
// that must be the same in every store. A backend that can lock one key
// implements Backend, three methods, and NewLocked turns it into a
// complete store; the conformance suite checks it:
//
//	store := storekit.NewLocked(myBackend, storekit.LockedConfig{Name: "mystore"})
//	g, err := idem.New[string](store) // a user hands the store to idem.New
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{NewStore: newMyStore})
//	}
//
// Users of idem never import this package: they pick a store and hand it
// to idem.New. Example builds a store on a map in this way. Besides the
// contract, the package holds:
//
//   - The rules, as storekit.Store's method docs state them. DecideClaim
//     applies Store.Claim's rules to the record a store read and says
//     whether there is something to write (Decision.Write);
//     ApplyHeartbeat, ApplyComplete and ApplyRelease return the record to
//     write or ErrLostOwnership. A store whose backend runs its own
//     scripts (Lua, SQL, condition expressions) implements the same rules
//     there, and these functions are their reference.
//   - The checks. ValidateClaim, ValidateOwner, ValidateCompletion and
//     ValidateKey reject calls no Guard makes (a typed error) before a store
//     touches its backend; an empty nonce owns nothing and is
//     ErrLostOwnership. Found is Store.Get's rule: a record that is
//     not live is ErrNotFound, whatever the backend's own expiry has
//     deleted.
//   - The record codec. EncodeRecord and DecodeRecord are a versioned JSON
//     form of a record for backends that keep a record as one value. A
//     record that does not decode is storekit.ErrCorruptRecord, and a store
//     must report it, never overwrite it.
//   - The adapter. Backend and NewLocked, as above: stores/memstore and
//     stores/filestore are built so.
//   - The wake-ups. Watchers keeps a store's watches of its keys in this
//     process: Watch is storekit.Watcher's method, Notify (the Changed hook
//     of NewLocked) wakes a key's waiters after a change.
//
// # Writing a store
//
// Implement Backend (or Store directly, with the rules above), and run
// the conformance suite from a test of your package:
//
//	func TestConformance(t *testing.T) {
//		storetest.Run(t, storetest.Harness{
//			NewStore: func(t *testing.T) storekit.Store { return newMyStore(t) },
//		})
//	}
//
// storetest depends on the standard library only. The Harness declares
// what else the store supports: a corrupter (Corrupt), so the suite checks
// that a damaged record is reported; a clock (NewStoreWithClock), so each
// subtest's store gets a storetest.Clock the suite advances, and staleness
// and expiry are checked exactly and without sleeping; listing, clean-up,
// rotation, and processes sharing the store.
//
// Times are Unix milliseconds from the store's clock: the caller's clock
// (replaceable, like memstore.WithClock) or the server's where the backend
// has one. Stores decide expiry by Record.ExpiresAt and staleness by
// Record.Stale, never by their backend's own expiry, which is garbage
// collection only.
package storekit
