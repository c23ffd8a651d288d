// Package natsstore keeps idem's records in a NATS JetStream key-value
// bucket (github.com/nats-io/nats.go/jetstream). Create the bucket, make
// the store from it, and hand the store to idem.New:
//
//	nc, err := nats.Connect(nats.DefaultURL)
//	js, err := jetstream.New(nc)
//	// Replicated 3 ways on a cluster; leave WithReplicas out on one server.
//	kv, err := natsstore.CreateBucket(ctx, js, "idem", natsstore.WithReplicas(3))
//	store, err := natsstore.New(kv)
//	defer store.Close() // stops the store's clean-up
//	g, err := idem.New[string](store, idem.OnDuplicate(idem.Wait))
//	chargeID, err := g.Do(ctx, "order-1001", charge)
//
// Every transition is a compare-and-set on the entry's revision, so the
// bucket's stream decides which of two writers wins, on every server of a
// cluster. A fresh call costs two round trips, a replay two (the refused
// publish and a read). Waiters are woken by a KV watch on the key.
//
// # Replication
//
// A bucket made with CreateBucket and WithReplicas(3) is a stream
// replicated by the servers' consensus: a claim that was acknowledged
// survives the loss of any one server, with no store option. With one
// replica (the default) the bucket is as durable as that server's storage.
//
// # Options and clean-up
//
// The store removes records expired more than the retention ago
// (WithRetention, default one minute) by itself while it is open, about
// every DefaultCleanup (five minutes; WithCleanup to tune it,
// WithoutCleanup for a program that calls Purge from a job of its own),
// until Close; processes sharing a bucket take turns, and no delete marker
// is left behind. A bucket with a max age (CreateBucket with WithMaxAge)
// leaves the removal to the server instead; the max age must outlive the
// Guards' TTL plus the retention (25h covers the defaults), and a claim
// whose record would outlive it is refused with a *MaxAgeError before fn
// runs.
//
// A bucket not made by CreateBucket needs history 1 (New refuses another,
// with an error matching storekit.ErrInvalidOption); give the store its
// JetStream context with WithJetStream, so that it can publish records
// with their expiry in a header and remove them by stream sequence.
//
// # Dead owners
//
// A Guard's claims name its process, and a claim of a process that died
// is taken over at once, not after the takeover threshold: each process
// subscribes to a subject of its own on the bucket's connection, and a
// claim that meets another process's in-progress claim asks that
// subject; the server's "no responders" says the owner is gone. A live
// owner, even a paused one, is never taken over before the threshold. It
// needs the connection: the Store takes it from its JetStream context
// (CreateBucket, WithJetStream) or from WithConn; without one the
// threshold decides. Fresh calls and replays cost nothing more.
//
// The store decides freshness, staleness and expiry with the caller's
// clock (WithClock replaces it): application hosts whose clocks are skewed
// by more than the takeover threshold minus the heartbeat interval could
// take over a live claim, so keep them on NTP.
//
// How each operation writes, how a clean-up pass reads the bucket and
// removes records safely beside new claims, what it costs, and how storage
// keys map to NATS keys are described in [docs/natsstore.md].
//
// [docs/natsstore.md]: https://github.com/idem-go/idem/blob/main/docs/natsstore.md
package natsstore
