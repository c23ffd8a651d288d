// Package isr coordinates incremental static regeneration (ISR): serving
// cached pages and regenerating each one with exactly one worker, so that a
// stale worker can never overwrite newer metadata.
//
//	table, err := isr.NewFileTable("/var/lib/isr") // or NewMemoryTable()
//	defer table.Close()
//	coord, err := isr.NewCoordinator(table)
//	bodies, err := body.NewFile("/var/lib/isr-bodies")
//	h, err := isr.NewHandler(coord, bodies, func(ctx context.Context, tenant, path string) ([]byte, string, error) {
//		return render(ctx, path) // the page's bytes and media type
//	})
//	http.Handle("/", h)
//
// Handler serves a fresh page with its ETag and Cache-Control s-maxage /
// stale-while-revalidate (If-None-Match gives 304); a stale page is served
// at once and regenerated in the background under a lease; a missing page
// is rendered once while concurrent requests wait for it. Bodies live in a
// body.Store (package isr/body: memory, file; S3 in dynamoisr), keyed by
// content hash.
//
// The DynamoDB table and S3 body store are in module
// github.com/idem-go/idem/isr/dynamoisr, the Redis table in
// github.com/idem-go/idem/isr/redisisr, so this module needs neither the
// AWS SDK nor a Redis client. All four tables (DynamoDB, Redis, FileTable,
// MemoryTable) keep one schema, the DynamoDB items' (pk "CACHE#<hash>",
// sk META, LOCK, REQ#<key>, VER#<id>), which is an interoperability
// contract with services in other languages sharing the table, and all
// pass the conformance suite in isr/isrtest.
//
// Coordinator runs the protocol under a Handler or on its own: Lookup
// reads a page's META; TryAcquire takes the lease without waiting; Publish
// publishes a Page under the lease and releases it in the same
// transaction; Regenerate and RegenerateFrom run the whole request-id flow
// (a fresh META short-circuits, a completed request returns its result, a
// held lease returns OutcomeInProgress so the caller serves stale). Every
// publish is conditioned on the lease token and expiry, so a refused write
// (a *TxError matching ErrLeaseLost, ErrVersionConflict, ...) writes
// nothing. RequestIDKey, MessageIDKey and VersionedKey derive the
// idempotency key; RequestHash hashes the inputs that matter.
//
// Expiry is decided in the writes' conditions with the caller's clock, so
// workers sharing a table must agree on the time to well within the lease
// duration. Every item that stops deciding anything carries a ttl and is
// removed once it passes (by DynamoDB's TTL, Redis, or the FileTable's and
// MemoryTable's own clean-up: WithCleanup, WithoutCleanup, Purge, Close).
//
// The table schema, each Table method, what keeps a table bounded, the
// stale-writer guards, every decision isr makes and how to write a Table
// of your own are described in [docs/isr.md].
//
// [docs/isr.md]: https://github.com/idem-go/idem/blob/main/docs/isr.md
package isr
