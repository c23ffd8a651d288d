// Package redisstore keeps idem's records on Redis 7.0 or later, or
// Valkey (through github.com/redis/go-redis/v9): standalone, Sentinel
// (redis.NewFailoverClient), Ring or Cluster. Make the store from a client
// and hand it to idem.New:
//
//	client := redis.NewClient(&redis.Options{Addr: "127.0.0.1:6379"})
//	store, err := redisstore.New(client, redisstore.WithPrefix("billing:"))
//	defer store.Close()
//	// Recommended at start-up: load the scripts and read the server's
//	// version and clock, so the first calls take the shortest commands.
//	err = store.LoadScripts(ctx)
//	g, err := idem.New[string](store, idem.OnDuplicate(idem.Wait))
//	chargeID, err := g.Do(ctx, "order-7", charge)
//
// ExampleNew runs these steps. A fresh call costs two round trips (claim,
// complete), a replay one, and a waiter is woken by pub/sub. The server's
// clock decides expiry and staleness, so callers with skewed clocks agree.
//
// # Replicas
//
// Redis replicates asynchronously: a claim acknowledged by a master that
// dies before its replica received it is lost on failover, and a second
// caller would run fn again. So a store refuses to run silently on a
// master with replicas: choose WithReplicaAck(n, timeout) (each claim and
// completion waits, in the same round trip, until n replicas hold it) or
// AcceptAsyncReplication() (a claim lost on failover may let fn run
// twice). Without either, every claim on a replicated deployment fails
// with a *ReplicationError matching ErrAsyncReplication. A claim that
// fewer than n replicas acknowledged is released and the call fails
// without running fn (ErrNotReplicated); a completion that fewer
// acknowledged is returned with its result and an error matching
// storekit.ErrNotRecorded.
//
// # Options
//
// WithPrefix names the keys (default "idem:"), WithRetention how long an
// in-progress record is kept past its expiry so fencing tokens keep
// counting (default one minute), WithWatchTimeout and WithHealthInterval
// tune the pub/sub wake-ups. New does no I/O and reports an invalid option
// as an error matching storekit.ErrInvalidOption.
//
// # Dead owners
//
// Each process holds one sharded Pub/Sub subscription per client and
// prefix (its presence, storekit.Presence): when the process dies, the
// server drops it, and a claim that meets that process's in-progress
// claim takes it over at once instead of after the takeover threshold. A
// live process is never taken over, except after it lost its
// subscription's connection, until go-redis subscribes again (the nonce
// refuses its late writes). Behind a proxy without Pub/Sub the threshold
// decides, as the log says. No round trip is added to a fresh call or a
// replay.
//
// # Errors and retries
//
// Redis failures are returned wrapped (errors.Is and errors.As find the
// go-redis error); a server that cannot be reached reads "redisstore:
// claim KEY: cannot reach the Redis server at ADDR: dial tcp ...". A
// record that does not decode is an *storekit.CorruptRecordError, never a
// panic, and nothing overwrites it; a nonce mismatch is
// storekit.ErrLostOwnership. go-redis retries a command after a network error,
// and a claim or completion whose first try was applied recognizes its own
// nonce, so a lost reply never turns a caller into its own duplicate.
//
// go-redis logs failed dials from its connection pool to stderr through
// its package-wide logger, which this package leaves alone; a program that
// reports the returned errors itself can quiet it once at start-up with
// redis.SetLogger.
//
// The record layout, the commands and Lua scripts behind each operation,
// which completion runs on which server, and how pub/sub wake-ups are
// never lost are described in [docs/redisstore.md].
//
// [docs/redisstore.md]: https://github.com/idem-go/idem/blob/main/docs/redisstore.md
package redisstore
