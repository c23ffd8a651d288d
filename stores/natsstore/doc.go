// Package natsstore is an storekit.Store on NATS JetStream key-value buckets
// (github.com/nats-io/nats.go/jetstream).
//
// Each storage key holds one KV entry: the record, encoded with storekit's
// versioned JSON codec, with its ExpiresAt in a header when the Store knows
// the bucket's stream (see Lifecycle). Every transition is a
// compare-and-set on the entry's revision, so the bucket's stream decides
// which of two writers wins, on every server of a cluster:
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
// a key whose entry was deleted (Delete, Guard.Forget) takes five: the
// refused publish, a read that finds the delete marker, and, as
// kv.Create does, a publish expecting no entry, a read of the marker's
// revision and the publish over it (TestWriteHeader counts them).
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
// over a live claim.
//
// # Lifecycle
//
// Records do not pile up, and nobody has to run a clean-up job. Which of
// two ways applies is decided by the bucket's max age
// (jetstream.KeyValueConfig.TTL, the stream's MaxAge).
//
// Without a max age (what CreateBucket makes by default), the Store removes
// records expired more than the retention ago (WithRetention, default one
// minute), and the delete markers Delete (Guard.Forget) leaves, by itself
// while it is open: about every DefaultCleanup (five minutes; WithCleanup
// to tune it, WithoutCleanup for users who call Purge from a job of their
// own), until Close. Processes sharing the bucket take turns: a pass first
// takes a lease entry in the bucket ("idem.cleanup.lease", written with
// Create, or Update on the revision read) and a process that finds it held
// by another skips its pass; the holder renews it after every batch and
// keeps it half an interval past its pass, and the intervals are jittered.
//
// A pass that finds nothing expired reads no live record. A Store that
// knows the bucket's stream (a bucket of CreateBucket, or WithJetStream)
// writes each record by publishing it to the stream itself, as kv.Update
// does (expecting the key's last revision; over a delete marker as
// kv.Create does), with the record's ExpiresAt in the message's
// "Idem-Expires-At" header (Unix milliseconds); the KV API reads such an
// entry like any other, and a fresh claim is one request, as with
// kv.Update. A pass reads the bucket once, in stream order, 100 entries per
// request, through a headers-only pull consumer of its own: the server
// sends each entry's headers without its record, and the pass decides on
// the expiry header. A record of the store's without the header (one
// written through the KV API, by a Store that does not publish or by
// another writer) is read by its sequence and decided on (when most of a
// chunk are such records, the pass reads the rest of the bucket with values
// instead); keys that are not the store's are never read. A Store writes
// through the KV API (kv.Create, kv.Update) when it does not know the
// stream, when its JetStream context has a domain or an API prefix, or when
// the stream is a mirror or has subjects other than "$KV.<bucket>.>"; a
// WithJetStream Store learns the stream at its first status read (its first
// claim). A Store that does not publish has records without the header, and
// its pass receives the entries with their values (through the same pull
// consumer when it knows the stream, through a KV watch when it does not):
// those are the cases where a pass reads live records.
//
// A pass removes what is expired in batches of storekit.DefaultPurgeBatch,
// one request at a time (records read by sequence too), resting as long
// as it worked after every 20 removals or reads and every chunk read, so
// the store's calls beside it keep their speed. A removal deletes the
// stream message whose sequence is the revision the pass read: a claim
// that rewrote the key after the read is another, later message, which the
// deletion cannot touch, so the claim wins; and no delete marker is left.
// The expiry header and the record are one message, so a pass that decides
// on the header removes exactly what it would on the record. The stream
// must allow message deletes for that, which jetstream.CreateKeyValue's
// buckets do not: CreateBucket makes the bucket's stream itself, as
// CreateKeyValue would but with deletes allowed. (kv.PurgeDeletes is not
// used: it purges a marker's whole subject, so a claim written between its
// listing and its purge would be lost; and a stream purge filtered on one
// key takes tens of milliseconds per key on nats-server 2.9, holding the
// stream.) On a bucket whose stream denies deletes, or without the
// bucket's JetStream context (WithJetStream, for a bucket not from
// CreateBucket), a pass removes records with KV purges conditioned on the
// revision read (jetstream.LastRevision), which are as safe but leave one
// marker per removed key, and logs a warning once.
//
// Measured on one nats-server 2.9.10 on a two-core machine
// (TestSoakCleanup, IDEM_SOAK=1), 20,000 expired records: one pass
// removed them in 7.7-12.2 s over five runs, leaving the stream with only
// the live records and the lease entry, and a probe of fresh and replayed
// calls beside it had a p99 1.0-1.8 times its p99 in an equal window
// without a pass, and a worst call within 5.3 ms of that window's. With
// two removals in flight the p99 was 1.85-2.52 times (three runs). A
// Purge that lists every key, then reads and purges each one by one
// (legacyPurge in the soak test), took 23 s (26.7 s in another run), left
// 20,000 markers for good, and the probe's worst call beside it was
// 301 ms against 89 ms.
//
// On the same server and machine at a load average of 5 to 8: a pass over
// 20,000 live records with 1 KB results that finds nothing expired
// (TestSoakLivePass, IDEM_SOAK=1) receives 2.2 MB, about 110 bytes per
// entry, and took 0.5-2.0 s over nine passes; a pass that receives the
// records receives 35 MB and took 1.5-4.0 s. With 16-byte results: 2.2 MB
// in 0.45-0.9 s against 8.3 MB in 0.84-0.99 s. Fresh claims published by
// the Store and fresh claims written with kv.Update, alternated, took the
// same (p50 50-100 µs against 60-100 µs, mean 62-154 µs against 66-150 µs
// over four runs), one request each. A pass removing 20,000 expired
// records with the expiry header (TestSoakCleanup, two removals in flight)
// took 7.2-9.1 s over seven runs, and one receiving the records 7.0-8.8 s;
// 20,000 records without the header (the pass reads them with values from
// its first chunk on) 9.2-9.4 s, against 8.5-8.9 s for a pass that
// receives the records, alternated.
//
// With a max age (CreateBucket with WithMaxAge, or a bucket of the user's
// own with a TTL), the server removes each entry that long after its last
// write, whatever the record's expiry, and the background pass does
// nothing (Purge still works). The max age must be at least the longest a
// record lives past a write: the Guards' claim lifetime (max(TTL, 2 ×
// takeover threshold): the TTL with the defaults) plus the store's
// retention; 25h covers the defaults (24h TTL, one-minute retention). The
// Store reads the bucket's max age (from CreateBucket, or with one status
// request at its first claim, again at every clean-up pass) and refuses a
// claim or a completion whose record would outlive it with a *MaxAgeError
// (matching storekit.ErrInvalidOption), before fn runs, rather than let the
// server drop a record a duplicate still needs.
//
// A user's own bucket needs history 1 and either no max age, with a
// stream that allows message deletes and WithJetStream (without
// WithJetStream passes read every record; on a stream that denies
// deletes, markers stay, one per removed key), or a max age as above.
// New refuses a bucket with a longer history (an error matching
// storekit.ErrInvalidOption), and so does every later status read (a pass, a
// listing): the stream would hold a key's older revisions beside its
// record.
//
// # Wake-ups
//
// Store implements storekit.Watcher with a KV watch on the key, so Guards in
// Wait mode are woken when the record changes instead of polling.
//
// # Keys
//
// NATS keys allow only letters, digits and "-_=./". A storage key is mapped
// to a KV key one to one: those characters except "=", "." and "/" stay,
// every other byte becomes "=" and two hex digits ("idem:3fa…" is stored
// as "idem=3A3fa…").
package natsstore
