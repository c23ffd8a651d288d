// Package dynamostore keeps idem's records in an Amazon DynamoDB table, one
// item per key. Create the table once, make the store from a client and
// the table's name, and hand the store to idem.New:
//
//	cfg, err := config.LoadDefaultConfig(ctx)
//	client := dynamodb.NewFromConfig(cfg)
//	// Once, at deployment: pk/sk strings, on-demand billing, TTL on "ttl".
//	err = dynamostore.CreateTable(ctx, client, "app")
//	store, err := dynamostore.New(client, "app")
//	g, err := idem.New[Invoice](store)
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
// DoTx and StepTx commit the items fn writes through its Tx (Put, Update,
// Delete, ConditionCheck, on any table, at most MaxTxItems) in one
// TransactWriteItems with the call's outcome, or a step's: fn's writes
// commit exactly when the outcome does.
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
// # What to know in production
//
// A fresh call costs two requests (PutItem, UpdateItem) and a replay of a
// completed key one (a refused PutItem); a takeover or a re-claim of an
// expired record one more. Expiry and staleness are decided in the
// condition expressions with the callers' clocks, never by DynamoDB's TTL
// deletion, so keep hosts on NTP: with the Guard's defaults (takeover
// after 30s, heartbeat every 5s) a live claim survives up to about 25s of
// skew, less the requests' latency. A DynamoDB item is at most 400 KB, so
// an encoded result must stay below about 399 KB; storage keys (with the
// prefix) are at most 2048 bytes. Errors that remain after the SDK's
// retries are returned as *storekit.StoreError wrapping the SDK error; a
// corrupt item is a *storekit.CorruptRecordError, and a live one is never
// overwritten.
//
// DynamoDB cannot tell that the process holding a claim died: a killed
// owner's claim is taken over after the takeover threshold (default 30s).
// A process restarted with idem.WithInstanceID takes over the claims its
// earlier incarnation left in progress at once, with no extra request: a
// claim stores its owner, and the claim's condition recognizes another
// incarnation of the same instance.
//
// The item's attributes, each request and its conditions, the fence that
// settles a transaction whose outcome is unknown, the skew arithmetic and
// measured costs are described in [docs/dynamostore.md].
//
// [docs/dynamostore.md]: https://github.com/idem-go/idem/blob/main/docs/dynamostore.md
package dynamostore
