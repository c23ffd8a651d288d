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
// # How a call goes
//
// Do derives a storage key from the caller's key (SHA-256, or HMAC-SHA256
// with WithSecret, over tenant, scope and key; the raw key is never stored)
// and makes one atomic Claim. The claim either creates an in_progress record
// with a fresh random nonce (attempt 1), takes over an in_progress record
// whose heartbeat is older than its owner's takeover threshold (stored
// with the claim, so a caller configured with a shorter threshold never
// takes over a live owner; new nonce, attempt+1), or returns the existing
// record untouched. A fresh call costs two store round trips (claim, complete); a replay of a completed key costs
// one; a call shorter than the heartbeat interval sends no heartbeat.
//
// While fn runs, the owner refreshes its claim every heartbeat interval.
// Heartbeat, complete and release are all conditioned on the nonce: an owner
// that was paused past the threshold and taken over cannot write anything.
// Its heartbeat notices, fn's context is cancelled with ErrLostOwnership as
// its cause (context.Cause), and Do returns an error matching
// ErrLostOwnership. An owner that cannot refresh its claim at all (the
// store unreachable from it) is stopped the same way once the claim has
// gone unrefreshed for the takeover threshold minus half a heartbeat interval,
// before another caller could take it over; its outcome is still recorded
// if nobody did. The claim's attempt number reaches fn as
// FencingToken(ctx), for downstream systems that reject tokens that go
// backwards.
//
// fn never starts under a claim that may have lapsed. A claim is
// heartbeated from the moment its reply arrives, its lease counted from
// when the request was sent (not from the reply), through everything
// between the claim and fn (rotation lookups, waits); right before fn (or
// a step's fn) starts, the Guard checks that the lease is still certainly
// held, and if the reply came too late for that (a slow network, a GC
// pause, a store under load), it claims again instead: by then another
// caller may have taken the claim over and run fn, and the new claim
// replays its outcome. A caller whose claims lapse three times in a row
// gets a *StoreError matching ErrLostOwnership, with nothing run.
//
// # Duplicates and failures
//
// OnDuplicate chooses what a duplicate gets. Return (default): the stored
// result of a completed key, or ErrInProgress while the first call runs.
// Raise: an error matching ErrDuplicate (and ErrInProgress while the first
// call runs). Wait: block until the first call completes, fails, is released
// or goes stale, then decide again; the caller's context bounds the wait.
// Stores that can push a change (memstore; filestore, between the stores
// of one directory in a process; redisstore, by pub/sub; sqlstore on
// PostgreSQL with Listen, by LISTEN/NOTIFY) wake waiters at once; with the
// others waiters poll with capped, jittered backoff. Under Return, ErrInProgress is what a duplicate of a running
// call gets: retry later, or use OnDuplicate(Wait).
//
// OnFailure chooses what an error from fn does. Unlock (default): the claim
// is released and the next call runs fn again. Lock: the failure's message
// and type (never a stack) are stored and replayed as a *RecordedFailure
// matching ErrPreviousFailure. A panic in fn releases the claim and is
// re-raised; runtime.Goexit releases it too; neither is recorded. Under
// Lock, an error matching context.Canceled or context.DeadlineExceeded
// returned after fn's context was cancelled (the caller's context ended,
// or the Guard stopped fn because its claim could not be refreshed) is the
// call being given up, not the operation failing: the claim is released,
// as under Unlock, so a retry runs fn again. (A context error of fn's own,
// such as a downstream timeout while fn's context is live, is stored like
// any other failure.)
//
// With Payload, the canonical hash of the call's inputs is stored with the
// claim; a call with the same key and a different payload gets
// ErrPayloadMismatch whatever the record's state (fail closed). Payloads
// are compared by their canonical JSON (map keys sorted), so two values
// that encode to the same JSON are the same payload: 1 and 1.0, a nil map
// and a nil slice (both null), []byte("abc") and the string "YWJj" (its
// base64), a struct and the map with its JSON field names. Give payloads
// types whose JSON tells apart what must not match.
//
// # A side effect that happened is not re-run
//
// If fn's result cannot be encoded (the codec fails, or it or the
// sanitizer panics), or the store refuses it for good (StoreError with
// Permanent set, such as an item over DynamoDB's 400 KB), the record still
// completes, without a result: the first caller gets its value, replays
// get ErrResultUnavailable. A failure stored under Lock is made storable
// first (valid UTF-8 without NUL bytes, at most 4 KiB, with its type); if
// the store refuses it anyway, it is stored with a 256-byte message.
//
// With the default JSON codec, a replay gets what JSON carries: a
// struct's unexported fields (and fields tagged json:"-") come back empty,
// whatever the first caller got. New refuses a result type JSON can never
// encode (a channel, a function or a complex number where JSON would reach
// it), with an error naming the path to it.
//
// If the completion cannot be written, it is retried with backoff for as
// long as the claim can still be ours (the takeover threshold). If it still
// fails, the record is read back before answering, since a write may have
// been applied with its reply lost: if it carries this call's outcome, Do
// succeeds. ErrNotRecorded (with fn's result) is answered only when it is
// true for good: a completion request delayed in the network could still
// land after the Guard gave up, so a record still in progress under the
// call's nonce is first fenced off: once it is stale, the Guard claims it
// with a new nonce (which the late request can no longer match) and
// records the outcome under that nonce after all (Do succeeds); if that
// completion fails too, the new claim is fenced off in turn and released,
// and ErrNotRecorded is then the truth. When no completion request can have
// reached the store (the connection could not be made) or the record has
// moved on to another claim, ErrNotRecorded is answered at once. When the
// record cannot be read, or the fence cannot be set, the error matches
// ErrOutcomeUnknown instead: the key may well replay the outcome. WithSanitize
// shapes what is stored: the first caller gets fn's full result, replays
// get only what the sanitizer kept.
//
// # A crash in the middle of fn: steps
//
// A takeover runs fn again from the top, so what fn did before its owner
// died would be done twice. Step records each side effect's outcome as it
// happens:
//
//	inv, err := g.Do(ctx, key, func(ctx context.Context) (Invoice, error) {
//		ch, err := idem.Step(ctx, "charge", func(ctx context.Context) (Charge, error) {
//			k, _ := idem.StepKey(ctx) // the same on every attempt of this call
//			return psp.Charge(ctx, req, k)
//		})
//		...
//	})
//
// A step's record is an ordinary record, under a storage key derived from
// the call's storage key, the call's steps epoch and the step's name,
// written with the ordinary Store operations: every store
// that passes storetest supports steps. A later attempt of the call (a
// takeover after a crash or a pause, a retry after a release) gets each
// finished step's recorded result without running it; the step in flight
// when its owner died runs again, with the same StepKey and a higher
// FencingToken (the step's own attempt), so a downstream that dedupes on
// the key sees one operation. A step whose owner is alive but lost the
// call's claim keeps its own claim alive (its context is not cancelled by
// that loss) and the new attempt waits for its outcome. A step whose fn
// returns an error is released, not recorded, and the error returns to
// fn. Results are encoded with the Guard's Codec (a step's type may differ
// from the Guard's). Steps do not nest: Step inside a step's fn is
// ErrNoCall, as is Step with a context no Guard handed to fn.
//
// The steps epoch. A forgotten call (Guard.Forget) must not replay its old
// steps, and step records cannot be listed, so a step's key includes the
// call's steps epoch: the nonce of an epoch record (a third derived key),
// claimed by the first Step of each attempt and never taken over while it
// lives (its takeover threshold is its lifetime). Forget deletes it: the
// old steps are then out of reach and expire. Costs: a step that runs is 2
// store round trips (claim, complete), a replayed step 1 (claim), and the
// first Step of each attempt 1 more (the epoch); a call without steps
// costs exactly what it did. idem ls lists an epoch as steps_epoch (see
// StateStepsEpoch), never as a stuck call, and idem unlock refuses it.
//
// A call's steps live as long as the call: the epoch and each finished
// step are written to live the Guard's TTL plus its lease, and each
// heartbeat of the call, once a quarter of that has passed, makes the
// epoch and every step the attempt ran or replayed live that long again
// (in the background; a few writes per call a day with the defaults). So
// a call that runs past its TTL and then dies has its steps replayed by
// the takeover, under the same StepKeys. An attempt reaches each step an
// earlier attempt finished within three quarters of that lifetime of that
// attempt's end (36 hours with the defaults), or runs it again.
//
// # Transactions
//
// For writes to the database that holds the records, a store package's
// DoTx (sqlstore.DoTx, dynamostore.DoTx) commits fn's writes and the
// completed record in one transaction, conditioned on the claim's nonce:
// a crash, a lost claim or a failed commit leaves neither. They are built
// on storekit.WithTx and storekit.TxRunner, which a third-party store can
// use too. A store
// package's StepTx (sqlstore.StepTx, dynamostore.StepTx) is the same for
// one step of a call, so that a call with external calls (Steps) writes
// to its database exactly once without holding a transaction open while
// they run; it is built on the same hook, passed to Step.
//
// # Forgetting a key
//
// Guard.Forget(ctx, key) deletes a key's record whatever its state, and its
// steps (see the steps epoch above): the next call of the key runs fn from
// the start. A call still running is not stopped; its completion is
// refused.
//
// # Rotating the secret
//
// WithSecret(active, previous...) changes the key-derivation secret
// without running any fn twice. New records are keyed with active. A call
// whose claim under the active key finds no live record reads the key
// under each previous secret before fn runs, and a record found there
// answers the call as if the key had not changed: a replay,
// ErrPreviousFailure, ErrPayloadMismatch, ErrInProgress or a wait, or a
// takeover of a stale claim under the record's own key, so its fencing
// token and its steps carry on. Where nothing is live under a previous
// key, it also reads that key's steps epoch: a call released there (an
// error under Unlock, a panic, a cancelled context) keeps one (a Guard
// with a secret makes sure of it before it releases a claim under which fn
// ran: one more write on that path), and the retry moves to that key, so
// a call's steps, its
// StepKeys and its rising fencing token belong to the call whatever the
// order of secrets of the process that retries it. So a fresh call pays
// two more round trips per previous secret while they are configured.
// Replays of records written under active cost one round trip, as before,
// and a replay that meets another caller's settling claim under the active
// key is answered from the record under the previous key, not "in
// progress".
//
// A rotation is three deploys: WithSecret(old, new), then
// WithSecret(new, old), then, once the TTL has passed, WithSecret(new).
// While the second rolls, processes of both configurations may each claim
// a key under their own active secret before they look under the other's.
// Both apply one rule: of two live claims that see each other, the one
// under the smaller storage key waits (holding its claim, heartbeating)
// until the other is gone, and the other yields (releases its claim and
// answers from the winner's). A process runs fn only after it has read
// every other key, while holding its own claim, and found no live claim
// there; two claims that each did so would each have been written after
// the other was read, which cannot be, so fn runs at most once (rotate.go
// has the whole argument). Under Return and Raise, a call that finds a
// call in progress under a key that sorts after its own waits at most one
// heartbeat interval for it to yield before it answers ErrInProgress.
//
// Forget deletes the key's record and steps under the active secret and
// under each previous secret, so no record under an old secret answers
// after it. A process configured with the old secret alone (before the
// first deploy of a rotation) does not look under the new one; forget the
// key from a Guard that has both.
//
// # Callers in one process
//
// Concurrent callers of one key in one process share one claim (or one
// wait) instead of each hitting the store, and are told exactly what a
// caller in another process would be told: ErrInProgress under Return,
// ErrDuplicate under Raise, the first caller's stored outcome under Wait.
//
// # Time
//
// Freshness and expiry are decided by fields of the record (expires_at,
// heartbeat_at), never by whether the store's native expiry has deleted it;
// native expiry is set with a safety buffer and is garbage collection only.
// The Redis and SQL stores decide with their server's clock (Redis's own,
// PostgreSQL's clock_timestamp(), MySQL's UTC_TIMESTAMP(6)), so hosts with
// skewed clocks still agree. The memory, file and DynamoDB stores use the
// clock of the calling process: hosts whose clocks disagree by d see a
// claim go stale d early or late, so keep d well below the takeover
// threshold minus the heartbeat interval (with the defaults, 30s - 5s).
// Expired or released records are kept a while so that attempt numbers
// (fencing tokens) keep counting up; once a store has garbage-collected a
// record, the next claim starts again at 1.
//
// # Observability
//
// WithObserver (or WithLogger for log/slog) sees claims, hits, waits,
// takeovers, losses of ownership, failures, and steps run and replayed,
// with the storage key, never the caller's key or payload.
//
// # Bad input
//
// Nothing in the public API panics on bad input: a nil or zero Guard (make
// one with New), a nil context or a nil function is an error matching
// ErrInvalidOption.
package idem
