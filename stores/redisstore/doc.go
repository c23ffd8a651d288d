// Package redisstore is an storekit.Store on Redis (github.com/redis/go-redis/v9)
// 7.0 or later, or Valkey: standalone, Sentinel (redis.NewFailoverClient),
// Ring or Cluster.
//
//	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	store, err := redisstore.New(client, redisstore.WithPrefix("billing:"))
//	if err != nil { ... }
//	defer store.Close()
//	// Recommended at start-up: load the scripts and read the server's
//	// version and clock, so the first calls take the shortest commands.
//	if err := store.LoadScripts(ctx); err != nil { ... }
//	g, err := idem.New[string](store, idem.OnDuplicate(idem.Wait))
//	chargeID, err := g.Do(ctx, "order-7", charge)
//
// ExampleNew runs these steps. A fresh call costs two round trips (claim,
// complete), a replay one, a waiter is woken by pub/sub.
//
// # Options and guarantees
//
// WithPrefix names the keys (default "idem:"), WithRetention how long an
// in-progress record is kept past its expiry so fencing tokens keep
// counting (default one minute), WithWatchTimeout and WithHealthInterval
// tune the pub/sub wake-ups. New does no I/O and reports an invalid option
// as an error matching storekit.ErrInvalidOption.
//
// Replicas: Redis replicates asynchronously, so a store refuses to run
// silently on a master with replicas. Give WithReplicaAck(n, timeout) (each
// claim and completion waits, in the same round trip, until n replicas hold
// it) or AcceptAsyncReplication (a claim lost on failover may let fn run
// twice); without either, every claim on a replicated deployment fails with
// ErrAsyncReplication. See "Replicated Redis" below.
//
// Which completion runs on which server (the answers are the same on
// every path; only the cost differs):
//
//   - Valkey 8.1+ and Redis 8.4+, standalone, Sentinel or Cluster: a native
//     SET IFEQ writes the record the client built (see "The conditional
//     completion").
//   - Redis 7.x, standalone, Sentinel or Cluster: the same conditional SET
//     as the four-line script lua/set_ifeq.lua.
//   - A Ring, before the store has read the server's clock (LoadScripts
//     does so at once; otherwise the first completion starts it in the
//     background), or when the key no longer holds exactly the claim (a
//     waiter marked it, a takeover): the complete script.
//
// Server time per completion of a fresh claim (INFO commandstats, median
// of nine alternating rounds of 3000): Redis 7.0, lua/set_ifeq.lua 21.9 µs
// against 30.3 µs for the complete script; Valkey 8.1, SET IFEQ 3.8 µs
// against 44.5 µs. A fourth path, a fast path of the complete script for
// an untouched fresh claim, cost what the full script costs (33.0 against
// 32.2 µs) and is not kept.
//
// # Retries
//
// go-redis retries a command after a network error. A claim whose first try
// was applied finds its own nonce and answers Claimed; a complete whose
// first try was applied finds its own nonce and succeeds again. So a lost
// reply never turns a caller into its own duplicate.
//
// # Errors
//
// Redis failures are returned wrapped (errors.Is and errors.As find the
// go-redis error); a server that cannot be reached reads "redisstore:
// claim KEY: cannot reach the Redis server at ADDR: dial tcp ...".
// A record that does not decode (malformed header, lengths that do not add
// up, another key, wrong type at the key, unknown version) is an
// *storekit.CorruptRecordError, never a panic, and no script overwrites it. A
// nonce mismatch is storekit.ErrLostOwnership. New reports an invalid option as
// an error matching storekit.ErrInvalidOption.
//
// go-redis itself logs failed dials from its connection pool ("failed to
// dial after 5 attempts") to stderr through its package-wide logger; this
// package never replaces it, since a library must not change a program's
// logging. A program that reports the returned errors itself can quiet it
// once at start-up with redis.SetLogger, given any value with a
// Printf(ctx context.Context, format string, v ...interface{}) method
// that discards or forwards the line.
//
// # Replicated Redis
//
// Redis replicates asynchronously: a claim acknowledged by a master that
// dies before its replica received it is lost on failover, and a second
// caller would run fn again. So a store does not run silently on a master
// with replicas: its first claim (and one a minute after that) asks the
// deployment (INFO replication connected_slaves on the master, on every
// master of a Cluster, on every shard of a Ring; New does no I/O), and
// when a master has replicas and neither WithReplicaAck nor
// AcceptAsyncReplication was given, every claim fails before writing
// anything with a *ReplicationError matching ErrAsyncReplication and
// storekit.ErrInvalidOption. WithReplicaAck(n, timeout) sends a WAIT n
// timeout in the same pipeline (the same connection, one round trip) as the
// claim's SET NX GET (the claim script, when it runs) and the complete
// script. On a Cluster the pipeline goes to the
// key's master, so the WAIT counts the replicas of the node that took the
// write. A claim that fewer than n replicas acknowledged in time is released
// and Claim returns a *ReplicaAckError matching ErrNotReplicated, so the
// Guard fails the call without running fn. A completion that fewer than n
// replicas acknowledged returns an *storekit.NotRecordedError wrapping a
// *ReplicaAckError, so the Guard returns the result together with that
// error (matching storekit.ErrNotRecorded) at once. WAIT makes a write survive the
// failover of a master to an acknowledging replica; it does not make Redis
// strongly consistent (a replica that lost the race can still be promoted
// when more than n replicas exist and fewer acknowledged).
//
// # Internals
//
// The sections below describe the record layout, the scripts and the
// completion paths for reviewers and operators reading raw keys; a user of
// the store needs none of it.
//
// # Layout
//
// A record is one Redis string at <prefix>{<digest>}, where the digest is
// 128 bits of the storage key in base64url (see Store.Key): a fixed-width
// ASCII header of 122 bytes, then the variable parts. The header is "R3"
// (the encoding version), a status byte (P in_progress, C completed, F
// failed), a flags byte (a hex digit: has result, has error, relative
// times, watched), expires_at, heartbeat_at, started_at, completed_at,
// attempt and the owner's takeover threshold as 13-digit zero-padded
// decimals (times in Unix ms), and the lengths of the nonce, payload hash,
// key, result, error message and error type; the variable parts follow in
// that order. lua/common.lua lists the offsets. A script reads the few
// header fields it needs with string.sub and checks the whole header with
// one anchored pattern before it writes; the Go client decodes the rest.
// A value of another encoding version is ErrCorruptRecord and no script
// overwrites it. The hash tag makes every key of one operation (the record
// and its change channel <prefix>{<digest>}:changed) hash to the same
// Cluster slot and Ring shard.
//
// # Expiry
//
// Redis deletes an expired key exactly, by its own clock, on every access
// (DESIGN rules 9 and 10), so a completed or failed record's native expiry
// is its expires_at itself: a completed or failed record that is present is
// live. Once it has expired it is gone, and so is its attempt number: a
// later claim starts again at attempt 1. An in-progress record (a released
// one too: Release keeps it with expires_at = now) is kept past its
// expires_at for the retention (WithRetention, default one minute), so the
// fencing token keeps counting up across a takeover of an expired claim and
// across a release, while an owner that stopped may still be running.
//
// A fresh claim is written by the client, which does not know the server's
// time: its times are relative (flag +4). expires_at holds the lease,
// completed_at the retention, heartbeat_at and started_at zero, and the key
// is written with PX lease + retention, so the server's clock fixes its
// PEXPIRETIME. The claim's absolute times follow from that: expires_at =
// PEXPIRETIME - retention, heartbeat_at = started_at = expires_at - lease.
// Every script and the Go decoder make such a record absolute before they
// look at it; a relative record on anything but a fresh claim, or on a key
// without an expiry, does not decode. The record Claim returns for a fresh
// claim carries the client's clock at the send as its times (the Guard uses
// only its nonce and attempt); Get returns the stored, server-clock times.
//
// # Atomicity, round trips and time
//
// Claim is one native command: SET key value NX GET PX lease+retention. No
// script, no transaction, no clock read. When the key is absent the SET is
// the claim. When it holds a completed or failed record, the SET
// writes nothing and returns it, and the record is the answer (Existing,
// or Claimed when it carries the claim's own nonce: an earlier try of this
// claim, applied). So a replay costs the server about what a GET does.
// When the key holds an in-progress record of another caller, whether it
// is stale needs the server's clock: the claim takes a second round trip,
// the claim script (atomic), which returns it untouched or takes it over.
// That is a duplicate of a running call or a takeover, both rare next to
// fresh calls and replays (DESIGN rule 2 allows it). A released or expired
// in-progress record and a value that does not decode (or a key of
// another type) go to the claim script too.
//
// Heartbeat, complete, release, get and delete are one embedded Lua script
// each (lua/*.lua, go:embed), run with EVALSHA and falling back to EVAL when
// the server does not have it cached: one round trip, one key. A fresh call
// is a claim and a complete (2 round trips); a replay is one claim (1). The
// scripts implement the rules of storekit.DecideClaim,
// storekit.ApplyHeartbeat, storekit.ApplyComplete and storekit.ApplyRelease
// natively. Now is the Redis server's clock (TIME in a script; a present
// completed record is live by the server's own expiry), so
// clients with skewed clocks agree on expiry and staleness. Staleness is
// judged by the takeover threshold stored with the claim (the caller's
// only for a record that has none).
//
// # The conditional completion
//
// Once the store has read the server's clock, the completion of a fresh
// claim is one conditional SET that writes the record the client built,
// and only if the key still holds exactly the claim's value (ifeq.go). The
// store remembers the value each fresh claim it made wrote with SET NX,
// until that claim's complete, release or heartbeat (at most 4096: when
// that many are held, all are forgotten at once, which only sends those
// completions to the complete script). A key that still holds exactly
// that value holds this caller's claim as its own client built it (valid,
// relative times, nobody watching: a heartbeat, a waiter's mark or a
// takeover would have rewritten it):
//
//	SET key record IFEQ claim PXAT expires_at
//
// natively on Valkey 8.1 and later and Redis 8.4 and later, whose SET
// takes IFEQ, and elsewhere as lua/set_ifeq.lua, the same in a four-line
// script (GET, compare, SET: no clock, no record built in Lua). The record
// is the one the complete script would write. The claim's value carries
// its random nonce, so a paused owner whose claim was taken over,
// released, or expired and claimed again writes nothing. The record's
// times are the server's clock as the store reads it: TIME, read in
// LoadScripts or in the background when the store first completes, and
// every 10 s after, kept as the server's time at a local monotonic instant
// (the local wall clock is never read), so a completion's completed_at is
// the server's time to within half that reading's round trip (at most 50
// ms, on loopback well under 1 ms), and its native expiry is its
// expires_at exactly, as for every completed record. When the
// key holds anything else (a waiter marked it, or the claim is gone) the
// conditional SET writes nothing and the complete script decides, as
// above: one more round trip, only then. The version comes from INFO
// server, read with the clock; a server that refuses IFEQ after all (a
// failover to an older one) sends the store back to the script until it
// reads the server again. This path is taken on a standalone or Sentinel
// client (*redis.Client) and on a Cluster (each master's version and clock
// read apart); with WithReplicaAck the SET is followed by WAIT in the same
// pipeline, as the script is. A Ring keeps the complete script.
//
// # Push wake-ups
//
// Store implements storekit.Watcher with pub/sub. Completions are not
// published by default: nobody waits on almost every key. Watch subscribes
// the key's change channel and, once the server confirmed the
// subscription, marks the record watched (flag +8, one script; a Guard
// watches only while it waits). The complete, release and takeover scripts
// PUBLISH only on a watched record, delete always. No wake-up is lost: a
// change that lands before the mark is seen by the waiter's next look (the
// Guard claims again as soon as Watch returns), and one after the mark is
// published to a subscription that already exists (TestNoLostWakeUp
// interleaves the completion at each point). A process of an earlier
// release waiting on a key does not mark it, so it finds the outcome with
// its safety poll instead of a push. The store keeps one shared
// subscription connection per Redis server it has to listen to (one for a
// standalone server or a Cluster, one per shard for a Ring) and
// multiplexes every watched key over it; Watch returns only after the
// server confirmed the subscription and the record is marked, so no
// publish after Watch returns is missed. When the subscription connection
// breaks, every watcher is woken (a spurious wake is safe: the Guard
// re-checks), and the connection is re-established and resubscribed by
// go-redis.
//
// On a Cluster the scripts use classic PUBLISH, which Redis Cluster
// broadcasts to every node, so one subscription on any node hears every key.
// Sharded pub/sub (SPUBLISH/SSUBSCRIBE) would keep each message on its
// slot's node, but go-redis binds a sharded subscription to the node of its
// first channel, so multiplexing keys would need one subscription per master
// plus resubscription on every slot migration. One small message per
// completion broadcast over the cluster bus is the cheaper trade at the
// publish rate of an idempotency store (one per completion that somebody
// waits for), and it keeps working through resharding.
package redisstore
