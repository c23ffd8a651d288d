// Package isr coordinates incremental static regeneration (ISR): serving
// cached pages and regenerating each one with exactly one worker, so that a
// stale worker can never overwrite newer metadata.
//
//	table, err := isr.NewFileTable("/var/lib/isr") // or NewMemoryTable()
//	if err != nil {
//		return err
//	}
//	defer table.Close()
//	coord, err := isr.NewCoordinator(table)
//	if err != nil {
//		return err
//	}
//	bodies, err := body.NewFile("/var/lib/isr-bodies")
//	if err != nil {
//		return err
//	}
//	h, err := isr.NewHandler(coord, bodies, func(ctx context.Context, tenant, path string) ([]byte, string, error) {
//		return render(ctx, path) // the page's bytes and media type
//	})
//	if err != nil {
//		return err
//	}
//	http.Handle("/", h)
//
// The DynamoDB table and S3 body store are in module
// github.com/idem-go/idem/isr/dynamoisr, the Redis table in
// github.com/idem-go/idem/isr/redisisr, so this module needs neither the
// AWS SDK nor a Redis client.
//
// # Table schema (interoperability contract)
//
// One DynamoDB table (name from FACETHEORY_CACHE_TABLE_NAME by default; see
// TableNameFromEnv), keys pk (S) and sk (S). pk is "CACHE#<sha256 hex of
// the cache key>" or "TENANT#<tenant>#CACHE#<sha256 hex>" (PK). Items:
//
//	sk "META"              s3_key S, generated_at N (epoch s), revalidate_seconds N,
//	                       etag S (optional), ttl N (optional);
//	                       recipe B adds current_sk S ("VER#<id>") and version N
//	sk "LOCK"              lease_token S, lease_expires_at N, ttl N (>= expiry + buffer)
//	sk "REQ#<idem key>"    request_hash S, status S (STARTED|COMPLETED|FAILED),
//	                       result_s3_key S (once COMPLETED), ttl N
//	sk "VER#<id>"          s3_key S, generated_at N, etag S (optional), ttl N (optional),
//	                       written with attribute_not_exists(pk)
//
// A page is fresh iff generated_at + revalidate_seconds > now (Meta.Fresh);
// a lease is held iff lease_expires_at > now (Lease.Held). TTL attributes
// are garbage collection only: every expiry decision is made in condition
// expressions against these fields with the caller's clock, so behaviour
// does not depend on whether TTL deletion has run, or when (DynamoDB up to
// days late, DynamoDB Local within about a minute). Clocks of workers sharing a table must agree to well within the lease
// duration; a worker whose clock runs behind can publish until its own clock
// passes lease_expires_at, but the lease token still stops it once another
// worker has taken the lease over.
//
// # API overview
//
// Table is the storage interface, one store request per method:
// GetMeta/GetLease/GetRequest/GetVersion; AcquireLease (conditional put:
// absent or expired, optionally "META not newer than I saw"), RefreshLease
// and ReleaseLease (token-conditioned); Publish (recipe A: one transaction
// of ConditionCheck LOCK token+expiry, Put META, Delete LOCK, optional
// Update REQ# to COMPLETED with result_s3_key); PublishPointer (recipe B:
// ConditionCheck LOCK, Put VER#<id> if absent, Update META current_sk with
// optimistic version and denormalised s3_key/etag/generated_at, Delete LOCK,
// optional REQ# completion, and a ttl on the VER# row it supersedes); BeginRequest (create REQ# if absent, fail
// closed on a different request_hash), FailRequest, AbandonRequest.
// Four implementations behave identically: dynamoisr.Table (DynamoDB,
// TransactWriteItems and conditional writes; dynamoisr.CreateTable makes
// the table), redisisr.Table (redisisr.NewTable: one hash per item under
// the cache key's hash tag, one Lua script per operation, each recipe one
// script), FileTable
// (NewFileTable: one host, one JSON file per item, flock, temp file +
// fsync + rename) and MemoryTable (NewMemoryTable). On Redis and in files an item keeps the
// DynamoDB item's attribute names and value types, so tools read one
// schema everywhere. Package isr/isrtest holds the conformance suite all
// four pass.
//
// Coordinator (NewCoordinator) runs the protocol with a clock, lease
// duration and TTL buffers: Lookup reads META; TryAcquire takes the lease
// without waiting; Publish publishes a Page (body key + ETag) under the
// lease with the configured recipe and releases the lease in the same
// transaction; Release gives the lease up; Regenerate runs the whole
// request-id flow (fresh META short-circuits; REQ# COMPLETED returns the
// recorded result; STARTED or a held lease returns OutcomeInProgress so the
// caller serves stale without waiting; a different request_hash fails
// closed; publish and REQ# completion in one transaction).
//
// RegenerateFrom runs the same flow from a META the caller has just read,
// so a server that served the stale page from that read regenerates it with
// two more store requests (acquire, publish).
//
// Handler (NewHandler) is an http.Handler on top: a fresh page is served
// with its ETag and Cache-Control s-maxage / stale-while-revalidate
// (If-None-Match gives 304); a stale page is served at once and regenerated
// in the background under the lease; a missing page is rendered once while
// concurrent requests wait for it. Bodies live in a body.Store (package
// isr/body: memory, file; S3 in dynamoisr), keyed by content hash, with the ETag derived
// from the content.
//
// Idempotency key helpers cover the three usual choices: RequestIDKey
// (x-request-id), MessageIDKey (queue message id) and VersionedKey
// (sha256 of cache key | deploy id | policy version); RequestHash hashes the
// inputs that matter.
//
// # Lifecycle
//
// A table runs for months; what it holds stays bounded. Every item isr
// writes that stops deciding anything carries a ttl, and every backend
// removes an item once its ttl has passed. Expiry itself is not left to
// that removal: conditions compare lease_expires_at with the caller's Now
// (a LOCK past it is free whether removed yet or not), and BeginRequest
// takes a REQ# item past its ttl as absent. Only completing, failing or
// abandoning a REQ# item past its ttl depends on the removal (refused once
// it has run), hence the rule on WithRequestTTL below.
//
//   - LOCK: ttl = lease_expires_at + WithTTLBuffer (default 1h). Both
//     publish recipes and Release delete it; a crashed worker leaves it,
//     expired once lease_expires_at passes (the next acquire takes it
//     over) and removed once its ttl passes. Removal never lets the stale
//     holder publish: refresh and both recipes require a LOCK carrying its
//     token with lease_expires_at > now, so they are refused with
//     ErrLeaseLost whether the LOCK expired, was removed or was taken over
//     (releasing a removed lease is ErrLeaseLost too: nothing to release).
//   - REQ# (STARTED, COMPLETED or FAILED alike): ttl = creation +
//     WithRequestTTL (default 24h). Past it the item counts as absent
//     (BeginRequest takes the key again), and it is removed. A publish
//     that completes a REQ# item removed meanwhile is refused
//     (ErrRequestState), so WithRequestTTL must exceed the longest render.
//   - META: a ttl only under WithMetaTTL (generated_at + d); otherwise kept,
//     one per cache key, for good.
//   - VER# (recipe B): the current row has META's ttl, if any. Each
//     publish gives the row it supersedes (PublishPointerInput.Previous,
//     Page.BaseSK, filled in by Regenerate) ttl = publish time +
//     WithTTLBuffer in the same transaction, and requires META to still
//     point there; a reader that read META just before the swap still
//     finds the old row. So a page holds its current row plus the rows
//     superseded within the buffer, not every version ever published. Rows
//     superseded by another service's publish are that service's to
//     expire; a service that points META back at an older row (a rollback)
//     must remove that row's ttl first.
//
// Who removes expired items:
//
//   - DynamoDB: its TTL deletion. dynamoisr.CreateTable turns it on for the ttl
//     attribute; a table made otherwise needs it turned on (UpdateTimeToLive,
//     attribute name "ttl"). DynamoDB deletes expired items within days,
//     DynamoDB Local within seconds to minutes; until then the conditions
//     above treat them as expired.
//   - Redis: the server. Every script that writes a ttl gives the item's
//     hash a native expiry, ttl - now from the write, now being the
//     writer's clock as in every condition (the instant EXPIREAT ttl would
//     name when the clocks agree; a clock far off, as in tests, cannot make
//     an item vanish at once). Items without a ttl get none (PERSIST).
//     Nothing to set.
//   - FileTable and MemoryTable: a clean-up goroutine of the table, on by
//     default about every DefaultTableCleanup (jittered, so processes
//     sharing a directory do not clean at once); WithCleanup(every) tunes
//     it, WithoutCleanup() leaves it to the user's own job calling Purge,
//     Close stops it. It removes an item only if it is expired at the
//     moment of removal, judged on the table's clock (WithTableClock) under
//     the lock the table's operations take: the MemoryTable's mutex, a
//     batch of storekit.DefaultPurgeBatch items at a time, reading only
//     expired items (an index by ttl), its maps rebuilt once they shrink
//     to a quarter; the FileTable's lock of the cache key, one item at a
//     time, read under it. The FileTable's walk opens no item file that
//     has not expired: every write sets an item file's modification time
//     to the item's ttl (a LOCK's lease_expires_at when later; 2200-01-01
//     UTC for an item without a ttl), and the walk lstats each file and
//     reads only those whose time has passed, so a pass that finds nothing
//     expired reads no live item. A file whose time says expired is judged
//     by the item it holds, and a live one gets its time set. The FileTable
//     also removes cache-key directories left empty and, under the cache
//     key's lock, temporary files crashed writers left. Its cache-key
//     directories sit under two levels of fan-out directories (at most
//     4,352, kept when empty; see FileTable), so a directory holds about
//     1/4,096 of the pages, not all of them.
//
// The removal's clock (the DynamoDB or Redis server's, the table's) must
// agree with the workers' clocks to well within WithTTLBuffer and
// WithRequestTTL.
//
// # Stale-writer guards
//
// Every publish is conditioned on the lease token and on lease_expires_at >
// now. Recipe B also requires META's version to be the one the page was
// regenerated from. WithMonotonicGeneratedAt adds generated_at <
// :new_generated_at. A refused write returns a *TxError built from the
// transaction's cancellation reasons, matching ErrLeaseLost,
// ErrVersionConflict, ErrVersionExists, ErrNotNewer, ErrRequestState or
// ErrConflict with errors.Is; nothing is written.
//
// # Decisions
//
//   - Times isr writes are whole epoch seconds, as the schema says. A
//     lease of d seconds acquired at t expires at ceil(t)+d, so it lasts at
//     least d and less than d+1s of real time. "now" in conditions is t
//     exactly (nanoseconds, as decimal text).
//   - Acquire used by Regenerate is conditioned on META not having been
//     published since it was read, so a worker that read a stale META just
//     before another worker published and released cannot regenerate the
//     page a second time. On DynamoDB that makes acquire a two-item
//     TransactWriteItems (one request). The check compares generated_at
//     as read, so a META isr republished within the same second as the one
//     the caller saw is not detected (only possible with
//     revalidate_seconds 0).
//   - Numbers are read in DynamoDB's decimal form (fractions and
//     exponents included, exponents within ±400) and compared exactly:
//     Meta.Fresh, Meta.StaleAt and Lease.Held use the text read
//     (Meta.GeneratedAtN, Meta.RevalidateSecondsN, Lease.ExpiresAtN; the
//     int64 fields hold the floored seconds), and every table's conditions
//     compare the stored text with the caller's exact Now and with the
//     exact generated_at the caller read (AcquireInput.IfMetaNotNewerN):
//     DynamoDB natively, Redis scripts and files by exact decimal
//     comparison. So isr agrees with a service that compares the numbers
//     as written (1795385591.7 + 60 > now), and what a worker read is what
//     its write is conditioned on. Anything else in a number attribute is
//     an ErrCorruptItem, except in ttl, which is taken as absent.
//   - A render whose lease cannot be refreshed (the table unreachable) is
//     stopped half a refresh interval before the lease expires, with a
//     *LapseError, and its page is not published, so it never overlaps a
//     worker that acquires the expired lease.
//   - A REQ# item whose ttl has passed counts as absent, as if TTL deletion
//     had run; a request left STARTED by a crashed worker therefore blocks
//     its key only until the REQ# ttl (WithRequestTTL).
//   - A FAILED request with the same request_hash is run again by default
//     (WithRetryFailedRequests).
//   - A worker that gets the request record but not the lease deletes its
//     STARTED REQ# item (AbandonRequest), so a retry is not told "in
//     progress" about work nobody is doing.
//   - Recipe A replaces META whole (Put): mixing recipes on one cache key
//     drops current_sk and version; use one recipe per table.
//   - Under recipe B the VER# row META points to decides s3_key,
//     generated_at and etag; META's own copies are optional. A META that
//     is only the pointer ({current_sk, version}, as a service publishing
//     recipe B from scratch writes it) takes revalidate_seconds from the
//     VER# row when the row has it, else the Coordinator's
//     WithDefaultRevalidate (default 60s); Meta.RevalidateMissing tells.
//     A recipe-A META without revalidate_seconds is corrupt.
//   - A Coordinator, Handler or table its constructor did not make (a nil
//     pointer, a zero value) is not usable: every method that returns an
//     error returns an *storekit.OptionError matching idem.ErrInvalidOption,
//     the others a zero result; none panics.
//
// # Writing a Table
//
// A table that keeps items in the schema reads each into an Item (attribute
// name to Attr, under the Attr* names) and serves its Get methods through
// ItemGetter, which follows recipe B's pointer and decodes every item
// alike. It writes the items LeaseItem, MetaItem, VersionItem and
// RequestItem build (and PointerMetaUpdate for recipe B), checks its input
// with the Validate functions, and answers with the same decisions
// (AcquiredLease, LeaseHeld, AcquireRefused, ExistingRequest,
// PublishRefusal, PointerRefusal, LeaseLost, RequestNotStarted) as the
// tables here, so that all refuse alike; isrtest.Run checks the result.
package isr
