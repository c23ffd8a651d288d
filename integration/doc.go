// Package integration holds tests that need several stores at once: the
// linearizability checks of every store against its real backend, and
// tests of packages built on the stores (such as idemhttp) run on more than
// one of them, the stores' fault-injection tests that need toxiproxy
// (packages redisfaults and dynamofaults), natsstore's tests on a JetStream
// cluster in the test process (natscluster), and the multi-process tests of
// idemgrpc and idemmsg, which share a file or Redis store between server or
// consumer processes (idemgrpc, idemmsg/...). It is a module of its own so
// that the stores' dependencies, and those of these tests, meet only here.
//
// It has no API and is never imported: it exists for its tests.
//
// # Linearizability
//
// TestLinearizable runs random concurrent histories (4 clients, 30
// operations each, 3 keys: claims with fresh and retried nonces, takeover
// thresholds of 2, 10 and 40 ms and 10 minutes, heartbeats, completions,
// releases, reads and deletes) against memstore, filestore, Redis,
// PostgreSQL, MySQL/MariaDB, DynamoDB Local and NATS JetStream, and checks
// each with porcupine against a sequential model of the storekit.Store
// contract (model_test.go explains how it treats the stores' clocks). An
// illegal history is logged with the operations on its key and the path of
// porcupine's visualization. On the stores that clean up after themselves
// (memstore, filestore, PostgreSQL, MySQL/MariaDB, NATS), opened with
// retention 0, a fifth client calls Purge every few milliseconds beside
// the others, and the model lets a released record vanish once it has
// expired past retention but never a live one: a claim, heartbeat or
// completion racing a clean-up must not lose. Flags:
//
//	go test -run TestLinearizable/redis -lin.histories=500 -lin.seed=42 .
//
// TestGuardLinearizable runs random histories of Guards, not Store calls,
// on the same stores: four clients configured with either order of two
// secrets (a rotation's second deploy), whose stores hold back about one
// claim, get and heartbeat reply in sixteen for one and a half takeover
// thresholds (the request applied, its reply late), call five keys with
// an fn that runs a step and then fails (a release), panics, runs past
// the threshold or returns. Every fn and step run is logged (started,
// ended with its value or failed, cut off by the Guard), and porcupine
// checks the log against the promise: a run starts only while no run of
// its key holds it and no outcome is recorded, a finished step never runs
// again, and a Do returns the recorded value. It catches a finished step
// run again after a release under the other order of secrets, and an
// owner's completion held back by a heartbeat reply slower than the
// threshold until its claim is taken over. Flag: -lin.guard=N histories per store (default 3).
//
// On PostgreSQL, MySQL/MariaDB, Redis and NATS, whose backends tell a dead
// owner, it also runs histories (subtests "<store>-lost-sessions",
// guardlost_test.go) whose clients each have a store of their own, so a
// presence token of their own, while a killer ends the presence session
// of a client whose fn runs, from outside, as the stores' own
// TestLostPresenceSession do (pg_terminate_backend, KILL, CLIENT KILL, a
// forced reconnection), every 20 ms to a threshold. The other clients
// then take its claims over at once (Event.OwnerGone) while its fn still
// runs, and the model allows exactly that: the taker's run may start
// before the old owner's Guard cuts it off at its next heartbeat, but
// only if the old owner's session was killed while its run held the key,
// and the old run's value is never recorded. Figures of a run with
// -lin.lost=20: 80 histories, 88 claims taken over from a killed session,
// 77 runs started while the old owner's was not yet cut off, none
// illegal. The filestore has no such runs: its presence is a flock held
// for the life of the process, which nothing outside can take. Flags:
// -lin.lost=N histories per store (default 3); -lin.lost.rotate (the
// clients use either order of two secrets; off by default, see
// lostRotate); -lin.lost.broken runs TestGuardLostSessionsBroken, which
// expects an illegal history on a store that ignores the nonce of
// heartbeats and completions.
//
// TestBrokenStoresRejected shows the check failing on three broken stores
// (one of them a Purge that deletes by a stale reading),
// and TestModel the model on hand-written histories.
package integration
