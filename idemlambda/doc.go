// Package idemlambda makes an AWS Lambda function do its work once per key
// across invocations, retries and concurrent executions, with its records
// in DynamoDB (stores/dynamostore) or any other idem store:
//
//	cfg, _ := config.LoadDefaultConfig(ctx)
//	store, err := dynamostore.New(dynamodb.NewFromConfig(cfg), "idempotency")
//	handler, err := idemlambda.Wrap(store, chargeOrder,
//		idemlambda.WithKeyPath("order_id"),              // JMESPath, as in Powertools
//		idemlambda.WithPayloadPath("[amount, currency]"), // same key, other amount: refused
//	)
//	lambda.Start(handler) // func(context.Context, Order) (Receipt, error)
//
// Three adapters, each returning a handler for lambda.Start:
//
//   - Wrap guards any handler func(ctx, E) (R, error): the key comes from
//     the event by a typed function (WithKey) or a JMESPath expression
//     (WithKeyPath; Powertools' powertools_json and base64 functions
//     work), by default the whole event; a repeat gets the recorded R.
//   - SQS guards each record of a batch by its message ID (or a key from
//     its body), skips those processed before, and returns the ones that
//     failed as events.SQSEventResponse's BatchItemFailures, so that only
//     they are redelivered.
//   - APIGateway and APIGatewayV2 answer REST and HTTP API requests with
//     package idemhttp's semantics, through its middleware: the
//     Idempotency-Key header, a replay of the recorded status, headers and
//     body, 409 while the first request runs, 422 for the key with another
//     request.
//
// # A claim ends with its invocation
//
// Lambda stops a function at its deadline, mid-work, without a word to it.
// An idem claim whose owner stops is normally taken over once its heartbeat
// is the takeover threshold old (30s by default), and a retry that comes
// sooner is told the key is in progress. Here a claim made in an invocation
// is dead once the invocation's deadline (ctx.Deadline(), which the Lambda
// runtime sets) and a grace (WithDeadlineGrace, 250ms by default) have
// passed, so a retry proceeds at once.
//
// How: the adapters hand the Guard a store that caps the lease of every
// claim and heartbeat made in an invocation at that instant. A record's
// lease (its ExpiresAt) is what makes it live, and the Guard's heartbeats
// can only extend a lease up to the cap; once it has passed, the record is
// expired, and the next claim of the key, a retry's, is a fresh claim in
// one round trip (its attempt number, the fencing token, counts on). Nothing
// else changes: a live invocation is never taken over before its deadline
// (within it, the takeover threshold and heartbeats work as they do
// anywhere), a fresh call still costs two round trips, and a call shorter
// than the heartbeat interval sends no heartbeat. A Guard outside Lambda,
// or a handler's context without a deadline, makes ordinary claims.
//
// The limits. The cap is computed with the invocation's clock and judged
// with the retry's (DynamoDB and the file and memory stores decide expiry
// with the caller's clock; Redis and SQL with the server's): the grace is
// the skew allowed between them. The design relies on the runtime stopping
// the function at the deadline: a handler that outlives its context's
// deadline (outside Lambda) may overlap a retry; its completion is then
// refused (idem.ErrLostOwnership), and the fencing token tells a
// downstream system which attempt is the newer. A takeover of a stale claim
// made without a deadline keeps that claim's longer lease. The work a
// timed-out invocation did before its deadline is done again by the retry,
// as after any crash: record each side effect as an idem.Step (it works in
// the handler's context), and the retry skips the steps already done.
// dynamostore.DoTx and StepTx need the Guard's own store and are not
// available under these adapters.
//
// # Keys, payloads and failures
//
// By default a Guard's namespace is the function's name
// (AWS_LAMBDA_FUNCTION_NAME): functions sharing a table never share a key
// (WithGuard(idem.WithNamespace(...)) to choose). The key is never stored
// raw. An event without a key fails with ErrNoKey (*NoKeyError), h not run,
// unless WithKeyOptional. A repeat whose payload differs fails with
// idem.ErrPayloadMismatch; one while the first runs with idem.ErrInProgress
// (or waits, WithGuard(idem.OnDuplicate(idem.Wait))). An error of the
// handler releases the claim, so Lambda's retry runs it again (or is
// recorded and replayed as idem.ErrPreviousFailure, with
// WithGuard(idem.OnFailure(idem.Lock)); not for API Gateway, where a 5xx is
// not recorded and WithHTTP(idemhttp.WithRecordStatus(...)) decides).
//
// An API Gateway response comes back from the record as the handler gave
// it, with canonical header names: a replay is byte for byte the first
// response, plus "Idempotent-Replayed: true". A body the handler marked
// IsBase64Encoded is recorded decoded beside a header that says so
// (Idemlambda-Base64-Encoded), and comes back encoded and marked; a
// WithReplayHeaders function must keep that header (a binary body whose
// mark it dropped still comes back in base64, since JSON cannot carry it).
//
// What an invocation costs: two store round trips for a first one, one for
// a repeat, as idem.Guard.Do; bench_test.go measures the time over the bare
// handler.
package idemlambda
