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
// PostgreSQL, MySQL/MariaDB and DynamoDB Local, and checks each with
// porcupine against a sequential model of the idem.Store contract
// (model_test.go explains how it treats the stores' clocks). An illegal
// history is logged with the operations on its key and the path of
// porcupine's visualization. Flags:
//
//	go test -run TestLinearizable/redis -lin.histories=500 -lin.seed=42 .
//
// TestBrokenStoresRejected shows the check failing on two broken stores,
// and TestModel the model on hand-written histories.
package integration
