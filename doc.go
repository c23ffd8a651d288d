// Package idem makes a function run at most once per key, across
// goroutines, processes and machines, and hands every duplicate caller the
// stored outcome instead of running the side effect again.
//
//	g, err := idem.New[Invoice](store, idem.WithTTL(24*time.Hour))
//	inv, err := g.Do(ctx, req.IdempotencyKey, func(ctx context.Context) (Invoice, error) {
//		return billing.Charge(ctx, req) // runs once per key
//	}, idem.Payload(req))
//
// The coordination state lives in a Store, each in a package of its own:
//
//   - stores/memstore: one process, in memory
//   - stores/filestore: the processes of one host, a directory of files
//   - stores/redisstore: Redis and Redis Cluster
//   - stores/sqlstore: PostgreSQL, MySQL/MariaDB and SQLite
//   - stores/dynamostore: Amazon DynamoDB
//   - stores/natsstore: a NATS JetStream key-value bucket
//
// stores/storetest is the conformance suite they all pass; package
// storekit holds what a store author needs.
//
// # What Do promises
//
// Do makes one atomic claim on a storage key derived from the caller's key
// (SHA-256, or HMAC-SHA256 with WithSecret; the raw key is never stored).
// The claim's owner runs fn and heartbeats the claim while it runs; every
// write it makes is conditioned on the claim's nonce, so an owner paused
// past the takeover threshold and taken over writes nothing: fn's context
// is cancelled and Do returns an error matching ErrLostOwnership. A claim
// whose owner died goes stale and is taken over with the next attempt
// number, which fn sees as FencingToken(ctx). fn never starts under a claim
// that may have lapsed. A fresh call costs two store round trips, a replay
// one. Concurrent callers of one key in one process share one claim and
// are told what a caller in another process would be told.
//
// A side effect that happened is not re-run because an outcome could not
// be stored: replays then get ErrResultUnavailable, and the first caller
// gets fn's result with ErrNotRecorded (known not stored) or
// ErrOutcomeUnknown (maybe stored). Nothing in the API panics on bad input
// (a nil or zero Guard, a nil context or function): it is an error matching
// ErrInvalidOption.
//
// # Policies
//
// OnDuplicate chooses what a duplicate gets. Return (default): the stored
// result, or ErrInProgress while the first call runs. Raise: an error
// matching ErrDuplicate. Wait: block until the first call is decided.
// OnFailure chooses what an error from fn does. Unlock (default): the claim
// is released and the next call runs fn again. Lock: the failure is stored
// and replayed as a *RecordedFailure matching ErrPreviousFailure. With
// Payload, a call that reuses a key with other inputs gets
// ErrPayloadMismatch.
//
// # Steps and transactions
//
// A takeover runs fn again from the top. Step records each side effect's
// outcome as it happens, so a later attempt replays the finished steps and
// runs again only the one in flight, under the same StepKey:
//
//	ch, err := idem.Step(ctx, "charge", func(ctx context.Context) (Charge, error) {
//		k, _ := idem.StepKey(ctx) // the same on every attempt of this call
//		return psp.Charge(ctx, req, k)
//	})
//
// A store package's DoTx (sqlstore.DoTx, dynamostore.DoTx) commits fn's
// database writes and the completed record in one transaction; its StepTx
// does the same for one step. Guard.Forget deletes a key's record and its
// steps.
//
// # Rotating the secret
//
// WithSecret(active, previous...) changes the key-derivation secret without
// running any fn twice, in three deploys: WithSecret(old, new), then
// WithSecret(new, old), then, once the TTL has passed, WithSecret(new).
//
// # In detail
//
// [docs/guarantees.md] says how a call goes, what happens when an outcome
// cannot be stored, rotation's three deploys, callers in one process, and
// time and clocks; [docs/steps-and-transactions.md] says how steps are
// recorded (the steps epoch, how long steps live, what they cost) and how
// transactions commit.
//
// [docs/guarantees.md]: https://github.com/idem-go/idem/blob/main/docs/guarantees.md
// [docs/steps-and-transactions.md]: https://github.com/idem-go/idem/blob/main/docs/steps-and-transactions.md
package idem
