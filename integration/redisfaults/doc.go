// Package redisfaults holds the fault-injection tests of
// github.com/idem-go/idem/stores/redisstore that need
// github.com/Shopify/toxiproxy/v2: connections reset mid-call, latency
// with spikes, a black-holed subscription connection, a Redis killed and
// restarted, and failovers to a replica whose replication stream the
// proxy holds (direct, Sentinel and Cluster; they start their own servers
// on ports 7201 and 7211-7296, see scripts/redis-replicas.sh). The
// failover tests run on Redis 7.0, whose completions run the complete
// script, and on Valkey 8.1 from the root scripts/backends.sh installs,
// whose completions are SET ... IFEQ. They live in
// the integration module, which is not published, so that a user of
// redisstore does not resolve toxiproxy and its dependencies.
//
// It has no API: it exists for its tests.
package redisfaults
