// Package dynamostore is an storekit.Store kept in an Amazon DynamoDB table:
// one item per call, one request per operation in the common case, and
// DoTx and StepTx to commit fn's own items with the outcome in one
// TransactWriteItems.
//
//	cfg, err := config.LoadDefaultConfig(ctx)
//	if err != nil { ... }
//	client := dynamodb.NewFromConfig(cfg)
//	// Once, at deployment: pk/sk strings, on-demand billing, TTL on "ttl".
//	if err := dynamostore.CreateTable(ctx, client, "app"); err != nil { ... }
//	store, err := dynamostore.New(client, "app")
//	if err != nil { ... }
//	g, err := idem.New[Invoice](store)
//	if err != nil { ... }
//	inv, err := g.Do(ctx, "order-1234", func(ctx context.Context) (Invoice, error) {
//		return billing.Charge(ctx, req) // runs once per key
//	})
//
// For DynamoDB Local, give the client its endpoint:
//
//	client := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
//		o.BaseEndpoint = aws.String("http://localhost:8000")
//	})
//
// # Options
//
// New takes a client (a *dynamodb.Client, or any Client) and a table name;
// an invalid option makes it fail with an error matching
// storekit.ErrInvalidOption.
//
//   - WithKeyAttributes(pk, sk): the table's key attribute names (default
//     "pk" and "sk"; sk "" for a table with a partition key only).
//   - WithSortKeyValue(v): the records' sort key value (default "IDEM"),
//     so they can share a single table with other items.
//   - WithKeyPrefix(p): put p in front of every storage key.
//   - WithRetention(d): how long past its expiry an item is kept before
//     DynamoDB's TTL may delete it (default one minute).
//   - WithClock(now): the clock expiry and staleness are decided with
//     (default time.Now).
//
// CreateTable takes WithKeyAttributes too (and ignores the other options).
//
// # Guarantees
//
//   - It passes storetest: at most one live claim per key, every write
//     conditioned on the claim's nonce, attempts (fencing tokens) that
//     never go backwards.
//   - A guarded fresh call costs two requests (PutItem, UpdateItem), a
//     replay of a completed key one (a refused PutItem); a takeover or a
//     re-claim of an expired record one more (see Operations and round
//     trips).
//   - Expiry and staleness are decided in the condition expressions with
//     the callers' clocks, never by DynamoDB's TTL deletion; keep hosts on
//     NTP. How much skew the takeover threshold tolerates is under Time.
//   - DoTx and StepTx commit fn's items exactly when the outcome (or the
//     step's record) commits (see Transactions).
//   - A corrupt item is reported as a *storekit.CorruptRecordError, never a
//     panic, and a live one is never overwritten.
//   - An encoded result must stay under about 399 KB (see Limits).
//
// # Transactions
//
// DoTx runs fn like Guard.Do and sends the writes fn added to its Tx
// (Put, Update, Delete, ConditionCheck, on any table, at most MaxTxItems)
// with the call's completed record in one TransactWriteItems: the record's
// update is conditioned on the claim's nonce, on the record still being in
// progress, and on no fence for this transaction (see below), so fn's
// writes commit exactly when the outcome does. The cost of a fresh call is
// two requests, the claim and the transaction; fn's writes add none.
// Outcomes: a lost claim cancels the transaction (storekit.ErrLostOwnership,
// nothing written, nothing released); fn's own failing condition cancels it
// with a *TxCanceledError naming the item (index, table, reason), and the
// claim is released; a cancellation caused only by concurrent transactions
// (TransactionConflict, for instance with this claim's last heartbeat) is
// sent again, with a new ClientRequestToken, up to 4 times. A send whose
// outcome is unknown (any other error: a timeout, a cut connection) was
// made with a ClientRequestToken, so the SDK's retries of it apply at most
// once, and is then settled by a fence: a conditional UpdateItem that
// writes the transaction's token into the record (attribute tx_fence)
// while the record carries this claim's nonce in progress. The
// transaction's condition excludes that token, so once the fence applied
// the transaction can never apply, even if its request is still on its
// way: nothing was committed, the claim is released and a retry runs fn
// again. A fence refused because the record is completed with this nonce
// means the transaction applied. If the fence gets no answer either, DoTx
// returns storekit.ErrOutcomeUnknown. Under OnFailure(Lock) an error from fn is
// recorded after the (unsent) transaction, as Do records it.
//
// StepTx is the same for one step of a call (idem.Step): fn's items and
// the step's completed record in one TransactWriteItems, conditioned on
// the step claim's nonce, with the same cancellations and fence. A StepTx
// that runs is 2 requests (the step's claim, the transaction), a replayed
// one 1 (TestStepTxRoundTrips); TestStepTxProcesses kills or stops its
// owner inside it: one row each time.
//
// # Limits
//
// A DynamoDB item is at most 400 KB, so an encoded result must stay below
// about 399 KB; a larger one makes Complete fail with a wrapped
// ValidationException. Storage keys (with the prefix) are at most 2048
// bytes.
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
//	                   with now (expressions have no arithmetic)
//	completed_at   N   only once completed or failed
//	expires_at     N   the record counts while expires_at > now
//	result         B   encoded result, when there is one
//	error_message  S   stored failure, when there is one
//	error_type     S   its type name (may be "")
//	ttl            N   epoch seconds: expires_at/1000 + the TTL buffer
//
// Decoding is strict: a missing or wrongly typed attribute, an unknown
// status or record_version is a *storekit.CorruptRecordError, never a panic. A
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
//   - Claim is a conditional PutItem of the whole in-progress record with
//     the condition attribute_not_exists(pk) and
//     ReturnValuesOnConditionCheckFailure = ALL_OLD. A key without a record
//     (a fresh call) is claimed by it; on a key with a record the condition
//     fails and the refused request already carries the existing record, so
//     a replay of a completed key, or a duplicate of a live claim, costs
//     one request and never a GetItem. Its expression is one function of one
//     name, which DynamoDB evaluates as cheaply as any write (see
//     Performance).
//   - Only when the record it got back is expired, released or a stale
//     claim (or cannot be decoded) does Claim send a second request: one
//     conditional UpdateItem whose condition is "absent, or expired, or an
//     in-progress claim with the same payload hash whose stale_at has
//     passed" (plus the type and version checks under Table). UpdateItem,
//     because the attempt number must stay monotonic across takeovers and
//     re-claims: the server computes attempt = if_not_exists(attempt, 0) + 1
//     in the same atomic step, and removes the old result, error and
//     completion time. A PutItem cannot, and would reset the fencing token.
//     A key this Store released itself (the retry after a failure under
//     idem.Unlock) is claimed with that UpdateItem directly; the Store
//     remembers up to 4096 such keys, as a hint only: the UpdateItem is
//     correct for any state of the item, and a PutItem for any key.
//   - Heartbeat, Complete and Release are UpdateItem conditioned on the
//     nonce (and on status = in_progress for heartbeat and release); a
//     refused condition is storekit.ErrLostOwnership. Get is a strongly
//     consistent GetItem; Delete is DeleteItem.
//
// A guarded fresh call therefore costs two requests (PutItem, UpdateItem)
// and a replay of a completed key one (a refused PutItem). A takeover of a
// stale claim or a re-claim of an expired record costs one more. The tests
// count HTTP requests with SDK middleware to prove it.
//
// Every call is checked with storekit's checks before a request is sent
// (storekit.ValidateClaim, ValidateCompletion, ValidateOwner, ValidateKey):
// a call no Guard makes, such as a claim without a nonce or with a lease or
// takeover threshold under a millisecond, or a completion with an unknown
// status or a TTL under a millisecond, is a *storekit.RequestError matching
// storekit.ErrInvalidRequest; an empty key, or one over 2048 bytes with the
// prefix, is an *storekit.KeyError; a heartbeat, completion or release with an
// empty nonce is storekit.ErrLostOwnership. Claim decides on the item a refused
// condition returns with storekit.DecideClaim (its Write says whether a
// second request is needed), a refused heartbeat with
// storekit.ApplyHeartbeat's ownership rule, and Get applies storekit.Found:
// an expired item DynamoDB has not deleted yet is storekit.ErrNotFound.
//
// A takeover (or heartbeat) that finds an expiry later than the one it would
// write keeps the later expiry, as storekit.DecideClaim does, with an
// UpdateItem conditioned on the exact nonce, heartbeat and expiry it saw (a
// compare-and-swap; a concurrent change makes it decide again).
//
// # Retries
//
// The SDK retries throttling and network errors. A retried claim whose first
// try was applied finds its own nonce in the refused condition's old item and
// returns Claimed; a retried complete, heartbeat or release is conditioned
// on the nonce only and applies again with the same values (so a completion
// whose first reply was lost is answered by the retry; when every reply is
// lost the Guard reads the record back before it answers:
// TestCompletionReplyLostIsReadBack). Errors that
// remain after the SDK's retries are returned as *storekit.StoreError wrapping
// the SDK error (errors.As finds the SDK's types.*Exception). The store uses
// no transactions, so there are no transaction cancellations to map.
//
// # Time
//
// Expiry and staleness are decided inside the condition expressions with the
// caller's clock (":now" in every request), never by DynamoDB's TTL deletion:
// DynamoDB deletes expired items up to days late, and DynamoDB Local (with
// TTL turned on) within about a minute. The ttl attribute is garbage collection only and carries a
// retention (WithRetention, default one minute) so an item is never
// deleted while it still counts.
//
// Clock skew between callers shifts the decisions. The owner writes
// heartbeat_at and stale_at = heartbeat_at + takeover threshold (T) with its
// clock; a claimant takes over when stale_at <= its own now. So a claimant
// whose clock is ahead of the owner's by s takes over a claim whose last
// heartbeat is h old (owner's time) exactly when s + h >= T. An owner that
// heartbeats every H, each heartbeat landing within d (request latency and
// retries) of its schedule, keeps a live claim as long as
//
//	s < T - H - d
//
// and, to survive one lost heartbeat as well (the Guard requires H <= T/2
// for that), s < T - 2H - d. With the Guard's defaults (T = 30s, H = 5s)
// that is 25s - d, or 20s - d across one lost heartbeat; at 2T of skew, a
// live claim is taken over at once (TestSkewedGuardClocks, TestSkewLimit).
// A takeover still increments the attempt, so a downstream system that
// checks the fencing token refuses the old owner's writes. A claimant whose
// clock is behind never takes over early, only s late. Expiry moves by s
// too: a completed record expires s early for a caller ahead (which matters
// only for TTLs of the order of the skew). A released record has
// expires_at = 0, so it is claimable at once at every clock, and a late
// heartbeat of its old owner cannot revive it. Keep hosts on NTP; for skew near the
// threshold use a longer WithTakeoverAfter, or a store that decides with
// the server's clock (redisstore, sqlstore).
//
// # Performance and capacity
//
// Expressions and the attribute-name maps are built once per Store; a
// request only allocates its values. Measured with the benchtable command
// (go run ./stores/dynamostore/internal/benchtable -server-pid PID)
// against DynamoDB Local with 32 and 64 concurrent callers, the server's CPU
// time per request, not the client's, decides the rate, and it grows with
// the expressions: a replay (refused claim) costs the server 0.56-0.72 ms,
// as the raw refused PutItem does; a fresh call costs 1.6-1.7 ms, as raw
// PutItem + UpdateItem do. The
// throughput ratios to the raw requests were 0.81-0.95 for replays and
// 0.86-1.09 for fresh calls, on a shared machine whose load moves them by
// about 0.1 from run to run. A fresh call consumes 2 WCU (1 + 1, items
// under 1 KB), as the raw requests do; a replay is a write refused by its
// condition, which DynamoDB charges as a write (1 WCU per KB of the item)
// without reporting it in ConsumedCapacity, exactly like the raw refused
// PutItem it matches.
package dynamostore
