// Package idem makes a function run at most once per key, across
// goroutines, processes and machines, and hands every duplicate caller the
// stored outcome instead of running the side effect again.
//
//	g, err := idem.New[Invoice](store, idem.WithTTL(24*time.Hour))
//	inv, err := g.Do(ctx, req.IdempotencyKey, func(ctx context.Context) (Invoice, error) {
//		return billing.Charge(ctx, req) // runs once per key
//	}, idem.Payload(req))
//
// The coordination state lives in a Store: stores/memstore (one process),
// stores/filestore (one host), stores/redisstore, stores/dynamostore and
// stores/sqlstore (many machines). stores/storetest is the conformance
// suite they all pass; package storekit holds what a store author needs.
//
// # How a call goes
//
// Do derives a storage key from the caller's key (SHA-256, or HMAC-SHA256
// with WithSecret, over tenant, scope and key; the raw key is never stored)
// and makes one atomic Claim. The claim either creates an in_progress record
// with a fresh random nonce (attempt 1), takes over an in_progress record
// whose heartbeat is older than its owner's takeover threshold (stored
// with the claim, so a caller configured with a shorter threshold never
// takes over a live owner; new nonce, attempt+1), or returns the existing record untouched. A fresh call costs
// two store round trips (claim, complete); a replay of a completed key costs
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
// # Duplicates and failures
//
// OnDuplicate chooses what a duplicate gets. Return (default): the stored
// result of a completed key, or ErrInProgress while the first call runs.
// Raise: an error matching ErrDuplicate (and ErrInProgress while the first
// call runs). Wait: block until the first call completes, fails, is released
// or goes stale, then decide again; the caller's context bounds the wait.
// Stores that can push a change (memstore, redisstore) wake waiters at once;
// with the others waiters poll with capped, jittered backoff.
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
// If the completion cannot be written, it is retried with backoff for as
// long as the claim can still be ours (the takeover threshold). If it still
// fails, the record is read back before answering, since a write may have
// been applied with its reply lost: if it carries this call's outcome, Do
// succeeds; if it shows the claim still in progress, or the store could
// not be reached at all, Do returns fn's result together with an error
// matching ErrNotRecorded; if a write may have been applied and the record
// cannot be read, the error matches ErrOutcomeUnknown instead. WithSanitize
// shapes what is stored: the first caller gets fn's full result, replays
// get only what the sanitizer kept.
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
// The Redis store decides with the Redis server's clock. The others use the
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
// takeovers, losses of ownership and failures, with the storage key, never
// the caller's key or payload. Counter counts them.
package idem
