// Package filestore is an storekit.Store that keeps one file per key in a local
// directory, safe for many goroutines and many processes on one host.
//
// # Layout
//
// A store directory holds (on-disk layout version 2):
//
//	<dir>/                         0700, created if missing
//	<dir>/<h0h1>/<h2>/<storage key>  one record per key, 0600, versioned JSON (storekit.EncodeRecord)
//	<dir>/<h0h1>/<h2>/.tmp-<key>-<n> a record being written (renamed over <key> when done)
//	<dir>/.locks/00 .. ff          256 lock files, 0600, never deleted
//	<dir>/.locks/clean             the clean-up lock, 0600, never deleted
//
// h0h1 and h2 are the first three hex digits of the SHA-256 of the
// storage key: 256 fan-out directories of at most 16 leaf directories
// each (all 0700, made when a first record needs them and kept when they
// empty, so there are never more than 4,352 directories, about 17 MB of
// directory blocks). A leaf holds about 1/4,096 of the records: about 250
// at a million records, where one flat directory would hold the million
// and keep the size it grew to. The fan-out is a trade: more leaves would
// keep each smaller, but every directory costs a block on disk and a
// read per pass even when empty. Every record file's modification time is the record's ExpiresAt
// (set by each write, before the rename), so a clean-up pass tells an
// expired record from a live one with lstat(2) alone; the decision itself
// is always made from the record (see Lifecycle).
//
// The file name of a record is the storage key itself, and nothing else: no
// path is ever built from caller input. Storage keys are validated strictly
// (see ValidateKey): only the characters A-Z a-z 0-9 . _ : - are allowed, a
// key may not start with a dot (so it can never name ".", "..", the lock
// directory or a temporary file) and is at most MaxKeyLen bytes. Anything
// else ("../x", "/etc/passwd", "a/b", a NUL byte, the empty key) is an
// *storekit.KeyError matching storekit.ErrInvalidKey before any file is touched.
// Keys made by an idem Guard ("idem:" and 64 hex digits) always pass.
//
// A record file also carries its key; a file whose stored key differs from
// its name (a copied file, or two keys differing only in case on a
// case-insensitive file system) is reported as corrupt rather than served
// for the wrong key.
//
// # Permissions
//
// New creates a missing directory (and its parents) with mode 0700. It
// refuses an existing directory that is group- or world-writable with an
// *UnsafeDirError (errors.Is ErrUnsafeDir) instead of changing its mode:
// another user able to create files in it could plant symbolic links or
// forged records, and silently tightening a directory the caller may share
// with other programs would be a surprise. Group- or world-readable
// directories are accepted (record files themselves are 0600). The .locks
// subdirectory gets the same treatment.
//
// # Atomicity
//
// Every transition (Claim, Heartbeat, Complete, Release, Delete, and each
// record Purge removes) is read-decide-write under the key's lock: the
// store is a storekit.Backend (load, locked update, delete of one file)
// under a storekit.Locked store, which makes every decision with
// storekit.DecideClaim and the storekit.Apply functions, as memstore does.
// The lock is one of 256 striped lock files in .locks, chosen by an FNV-1a
// hash of the key, taken with an exclusive flock(2) (github.com/gofrs/flock),
// plus an in-process mutex per stripe, because flock alone does not exclude
// goroutines that share a lock object. Lock files are never deleted:
// removing a lock file while another process waits on it would let two
// processes hold "the" lock at once. The stripe count and hash are part of
// the on-disk layout; every process sharing a directory must run a version
// of this package with the same layout.
//
// A lock is held for one read and one write of a small file. The kernel
// drops the locks of a process that dies, so a crash (even SIGKILL) never
// leaves a key locked; a claim it left in progress is taken over once its
// heartbeat is stale. A process that is stopped (SIGSTOP, a debugger) while
// holding a lock does block the writers of keys on that stripe until it
// continues or dies; they wait without spinning, and give up when their
// context ends.
//
// Reads need no lock: a record file is only ever replaced whole by rename(2),
// so a reader sees the old record or the new one, never a mix. Get, and a
// Claim that finds a live record it must not change (a replay of a completed
// key, a live claim held by someone else), therefore take no lock and do not
// write. A Claim that has to write re-reads and decides again under the lock.
//
// # Durability
//
// A write goes to a temporary file in the record's leaf directory, which
// is fsynced, renamed over the record, and then the leaf directory is
// fsynced (the rename is durable when the call returns), so after a crash
// or power loss a record is either the old one or the new one. A leaf or
// fan-out directory made for a write is fsynced into its parent before the
// record is written in it. Delete fsyncs the leaf after the removal; the
// clean-up does not (a removal lost to a power cut leaves a record expired
// past the retention, as the pass found it, and the next pass removes it;
// the next write to the leaf fsyncs the removal with it). A
// temporary file left behind by a crash is removed by the clean-up (under
// the lock of the key it belongs to, so a write in progress is never
// disturbed). WithoutSync skips the fsyncs: records still survive a
// process crash, but not necessarily a power loss or kernel crash.
//
// # Time and clock skew
//
// Expiry and staleness are decided from the fields of the record and the
// caller's clock (WithClock, default time.Now), never from file times. All
// processes sharing a directory are expected to run on one host and so share
// one clock; sharing a directory between hosts over a network file system is
// out of scope (flock semantics and rename atomicity are not guaranteed
// there, and skew between hosts would shift every takeover decision by the
// skew).
//
// # Lifecycle
//
// A record is removed once its ExpiresAt plus the retention period
// (WithRetention, default one minute) has passed on the store's clock.
// While a Store is open, a goroutine of its own does this about every
// DefaultCleanup (one minute; each wait jittered by ±50%, so processes
// started together spread their passes); WithCleanup(every) changes the
// interval, WithoutCleanup() runs none (for users who call Purge from a
// job of their own), and Close stops it. A pass first takes the
// directory's clean-up lock (.locks/clean) without waiting and is skipped
// if another process holds it, so the processes sharing a directory do
// not all clean at once. Purge runs the same pass when called.
//
// A pass walks the fan-out directories and lstat(2)s each record file; a
// pass that finds nothing expired opens no record (measured over 120,000
// live records: 0.8-1.0x the time of a plain filepath.WalkDir with lstat
// of the store, where the flat layout's pass read every file: 3.3x). A
// file whose modification time says it expired is a candidate;
// candidates are removed in batches of storekit.DefaultPurgeBatch, one
// at a time (an unlink waits on the file system's journal, and so does
// every claim's fsync beside it: removing several at once slows claims),
// each under its key's lock after reading the record again, and only if
// that reading says it has expired past the retention. A claim, heartbeat or completion racing
// the clean-up on the same key therefore never loses to it (the
// modification time is only a hint: a file whose time was changed by hand
// is judged by its record; a listing, Records, reads every record file and
// never skips one by its time). A claim waits for the clean-up at most the
// removal of one file under its stripe's lock. Empty leaf directories are
// kept, so file counts and directory sizes return to their baseline (at
// most 4,352 directories, each the size its share of the peak made it)
// once records expire.
//
// Removing an expired record forgets its attempt counter: the next claim
// of that key starts again at attempt (fencing token) 1. Give a retention
// longer than any downstream system remembers fencing tokens if that
// matters. Corrupt records are left in place, since their expiry cannot
// be read; Get reports them and Delete removes them. A Store that becomes
// unreachable without Close stops its clean-up too (runtime.AddCleanup),
// but call Close when you are done with a store.
//
// # Waiting
//
// A Store does not implement storekit.Watcher: it cannot see changes made by
// other processes, and a Guard given a Watcher trusts it and polls only
// slowly, so waiters in other processes would learn of a completion late.
// Against a plain Store a waiting Guard polls with a short, growing backoff.
// Store.LocalWatch returns a WatchingStore that does implement storekit.Watcher
// for directories used by one process only: its channel is closed after a
// claim, takeover, completion, release, deletion or purge of the key through
// any Store on the same directory in the process. Heartbeats do not wake
// watchers; they change nothing a waiter waits for.
package filestore
