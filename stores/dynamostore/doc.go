// Package dynamostore is an idem.Store kept in an Amazon DynamoDB table.
//
// # Table
//
// A record is one item. Its primary key is a partition key attribute (default
// "pk", a string holding the storage key behind an optional prefix) and a
// sort key attribute (default "sk", holding the constant "IDEM"), so the
// records can share a single table with the isr package's META, LOCK, REQ#
// and VER# items, whose partition keys start with CACHE# or TENANT#. Both
// names and the sort key value are options (WithKeyAttributes,
// WithSortKeyValue); a table without a sort key is used with
// WithKeyAttributes(pk, ""). CreateTable creates such a table (on-demand
// billing, TTL enabled on "ttl") and waits until it is ACTIVE.
//
// Record attributes (numbers are DynamoDB N, times Unix milliseconds):
//
//	record_version N   encoding version, 1
//	status         S   in_progress | completed | failed
//	nonce          S   ownership token of the current claim
//	attempt        N   claim number (the fencing token)
//	payload_hash   S   payload hash given at claim time ("" if none)
//	started_at     N
//	heartbeat_at   N
//	takeover_ms    N   the owner's takeover threshold, set at claim and
//	                   takeover; staleness is judged by it
//	stale_at       N   heartbeat_at + takeover_ms, rewritten by every
//	                   heartbeat, so the claim's condition can compare it
//	                   with now (expressions have no arithmetic); an item
//	                   without takeover_ms is judged by the caller's
//	                   threshold against heartbeat_at
//	completed_at   N   only once completed or failed
//	expires_at     N   the record counts while expires_at > now
//	result         B   encoded result, when there is one
//	error_message  S   stored failure, when there is one
//	error_type     S   its type name (may be "")
//	ttl            N   epoch seconds: expires_at/1000 + the TTL buffer
//
// Decoding is strict: a missing or wrongly typed attribute, an unknown
// status or record_version is a *idem.CorruptRecordError, never a panic. A
// live corrupt item is never overwritten by a claim: the claim's condition
// compares typed attributes (a takeover also checks the record_version and
// the types of nonce, attempt and started_at), so it fails and the refused
// item is decoded. An expired item is rewritten whatever it holds, except
// that one whose attempt is not a number makes the server reject the
// update, and the claim then reads the item to report it as corrupt.
// Delete removes a corrupt item.
//
// # Operations and round trips
//
// Every operation is one request in the common case:
//
//   - Claim is one conditional UpdateItem with
//     ReturnValuesOnConditionCheckFailure = ALL_OLD. Its condition is
//     "absent, or expired, or an in-progress claim with the same payload hash
//     and a stale heartbeat", so a claim on a live record fails the condition
//     and the refused request already carries the existing record: a replay
//     costs one request and never a GetItem. UpdateItem rather than PutItem
//     because the attempt number must stay monotonic across takeovers and
//     re-claims of an expired or released record; PutItem would need the old
//     attempt before writing, UpdateItem computes it on the server
//     (attempt = if_not_exists(attempt, 0) + 1) in the same atomic step, and
//     creates the item when it is absent. Old result, error and completion
//     time are removed in the same request.
//   - Heartbeat, Complete and Release are UpdateItem conditioned on the
//     nonce (and on status = in_progress for heartbeat and release); a
//     refused condition is idem.ErrLostOwnership. Get is a strongly
//     consistent GetItem; Delete is DeleteItem.
//
// A guarded fresh call therefore costs two requests (claim, complete) and a
// replay of a completed key one. The tests count HTTP requests with SDK
// middleware to prove it.
//
// Two rare cases take a second request: a takeover (or heartbeat) that finds
// an expiry later than the one it would write keeps the later expiry, as
// storekit.DecideClaim does, with a follow-up UpdateItem conditioned on the exact
// nonce, heartbeat and expiry it saw (a compare-and-swap; a concurrent change
// makes it start over).
//
// # Retries
//
// The SDK retries throttling and network errors. A retried claim whose first
// try was applied finds its own nonce in the refused condition's old item and
// returns Claimed; a retried complete, heartbeat or release is conditioned
// on the nonce only and applies again with the same values. Errors that
// remain after the SDK's retries are returned as *idem.StoreError wrapping
// the SDK error (errors.As finds the SDK's types.*Exception). The store uses
// no transactions, so there are no transaction cancellations to map.
//
// # Time
//
// Expiry and staleness are decided inside the condition expressions with the
// caller's clock (":now" in every request), never by DynamoDB's TTL deletion:
// DynamoDB Local never deletes expired items, and DynamoDB deletes them up to
// days late. The ttl attribute is garbage collection only and carries a
// retention (WithRetention, default one minute) so an item is never
// deleted while it still counts.
//
// Clock skew between callers shifts the decisions: a caller whose clock is
// ahead by s sees a heartbeat s older than it is, so it takes a claim over
// s early. Takeover stays safe while skew + heartbeat interval + request
// latency stays below the takeover threshold (with a 5s heartbeat and 30s
// takeover, up to about 20s of skew). Expiry of completed records moves by
// the same s, which only matters for TTLs of the order of the skew. A
// released record (expires_at = the releaser's now) looks live to a caller
// whose clock is behind until its clock catches up.
//
// # Limits
//
// A DynamoDB item is at most 400 KB, so an encoded result must stay below
// about 399 KB; a larger one makes Complete fail with a wrapped
// ValidationException. Storage keys (with the prefix) are at most 2048
// bytes.
package dynamostore
