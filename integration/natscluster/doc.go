// Package natscluster holds the tests of
// github.com/idem-go/idem/stores/natsstore that run a 3-server JetStream
// cluster in the test process (github.com/nats-io/nats-server/v2): claims
// taken while the bucket's stream leader is killed, on a bucket replicated
// three ways (none lost) and on one kept by a single server in memory
// (lost). They live in the integration module, which is not published, so
// that a user of natsstore does not resolve nats-server and its
// dependencies.
//
// It has no API: it exists for its tests.
package natscluster
