// Package filestore keeps idem's records in a local directory, one file
// per key, safe for many goroutines and many processes on one host. Make
// the store from a directory and hand it to idem.New:
//
//	store, err := filestore.New("/var/lib/app/idem") // made 0700 if missing
//	defer store.Close() // stops the store's clean-up
//	g, err := idem.New[string](store)
//	v, err := g.Do(ctx, "send-welcome-mail:42", sendWelcomeMail)
//
// Every process on the host that opens the same directory shares the
// records: a key runs once across all of them. Each transition is a read,
// a decision and a write under the key's lock (a striped flock(2), which
// the kernel drops when a process dies, so a crash never leaves a key
// locked); each write goes to a temporary file that is fsynced and renamed
// over the record, so a record is always the old one or the new one, even
// after a power loss. Reads take no lock, so a replay neither locks nor
// writes.
//
// A process that dies holding a claim frees it at once: each process holds
// a lock on an owner file of its own (in .locks/owners) for as long as it
// lives, its claims name that file, and the next claim of such a key finds
// the lock released by the kernel and takes the claim over (attempt + 1, a
// higher fencing token) instead of waiting for the takeover threshold. A
// process that lives, running or paused, is never taken over before the
// threshold.
//
// # Options
//
// WithRetention sets how long a record is kept once expired (default one
// minute). The store removes such records itself while it is open, about
// every DefaultCleanup (one minute), one process at a time per directory;
// WithCleanup(every) changes the interval, WithoutCleanup() turns it off
// for a program that calls Purge from a job of its own. WithoutSync skips
// the fsyncs (records survive a process crash, not necessarily a power
// loss). WithClock replaces the clock expiry and staleness are decided
// with.
//
// # What to know in production
//
// The directory must be on a local file system of one host: flock and
// rename are not atomic over a network file system, and hosts' clocks
// would disagree. New refuses an existing directory that is group- or
// world-writable with an *UnsafeDirError (ErrUnsafeDir) rather than change
// its mode; record files are 0600. Storage keys are checked by ValidateKey
// (A-Z a-z 0-9 . _ : -, no leading dot, at most MaxKeyLen bytes) before
// any file is touched, so no path is ever built from caller input; a
// Guard's keys always pass.
//
// A Store does not wake waiters in other processes: a waiting Guard polls
// with a short, growing backoff. For a directory used by one process
// only, Store.LocalWatch returns a WatchingStore whose waiters are woken
// at once.
//
// The on-disk layout (version 2: fan-out directories, lock files), the
// locking, durability and clean-up passes, and what they cost are
// described in [docs/filestore.md].
//
// [docs/filestore.md]: https://github.com/idem-go/idem/blob/main/docs/filestore.md
package filestore
