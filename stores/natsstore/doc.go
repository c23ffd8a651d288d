// Package natsstore is an idem.Store on NATS JetStream key-value buckets
// (github.com/nats-io/nats.go/jetstream).
//
// Each storage key holds one KV entry: the record, encoded with storekit's
// versioned JSON codec. Every transition is a compare-and-set on the
// entry's revision, so the bucket's stream decides which of two writers
// wins, on every server of a cluster:
//
//   - Claim publishes a new record expecting the key to be absent
//     (revision 0). If the key exists, it reads the entry and decides with
//     storekit.DecideClaim; a takeover or a claim of an expired record is
//     an Update against the revision just read, retried from the read on a
//     conflict.
//   - Heartbeat, Complete and Release are Updates against the revision the
//     owner last wrote or read (kept in the Store, per key), checked for the
//     nonce; on a revision conflict the entry is read again and the rule
//     re-applied, so a write never lands on a record its rule did not see.
//
// Round trips per Guard call: a fresh call 2 (the claim's publish and the
// completion's update); a replay 2 (the refused publish and a read); a
// call shorter than the heartbeat interval sends no heartbeat. A claim of
// a key whose entry was deleted (Delete, Guard.Forget) takes one more.
//
// # Replication
//
// A bucket made with CreateBucket and WithReplicas(3) is a stream replicated
// by the servers' consensus (Raft): a write is acknowledged only once a
// majority holds it, so a claim that was acknowledged survives the loss of
// any one server, with no store option. That is the difference from Redis,
// which replicates asynchronously (see redisstore.WithReplicaAck). With one
// replica (the default, so a single server works) the bucket is as durable
// as that server's storage.
//
// # Time
//
// The store decides freshness, staleness and expiry with the caller's clock
// (WithClock to replace it): application hosts whose clocks are skewed by
// more than the takeover threshold minus the heartbeat interval could take
// over a live claim. Entries are not expired by the server; Purge deletes
// records that expired more than the retention ago.
//
// # Wake-ups
//
// Store implements idem.Watcher with a KV watch on the key, so Guards in
// Wait mode are woken when the record changes instead of polling.
//
// # Keys
//
// NATS keys allow only letters, digits and "-_=./". A storage key is mapped
// to a KV key one to one: those characters except "=", "." and "/" stay,
// every other byte becomes "=" and two hex digits ("idem:3fa…" is stored
// as "idem=3A3fa…").
package natsstore
