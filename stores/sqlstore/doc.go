// Package sqlstore is an idem.Store kept in a PostgreSQL or MySQL/MariaDB
// table, through database/sql:
//
//	db, _ := sql.Open("pgx", dsn) // github.com/jackc/pgx/v5/stdlib
//	store, err := sqlstore.New(db, sqlstore.Postgres)
//	err = store.Migrate(ctx)       // CREATE TABLE / INDEX IF NOT EXISTS
//	g, err := idem.New[Invoice](store)
//
// For MySQL or MariaDB use github.com/go-sql-driver/mysql and
// sqlstore.MySQL.
//
// # Table
//
// One row per key, in a table shaped like the common idempotency_keys
// table (name "idempotency_keys" unless WithTable says otherwise):
//
//	tenant, scope   the Guard's namespace (idem.WithNamespace), written
//	                from each claim request; informational: tenants and
//	                scopes share a table because the storage key already
//	                hashes them in
//	key_hash        the storage key ("idem:" + 64 hex digits); never the
//	                caller's raw key; PRIMARY KEY (key_hash), so every
//	                call after the claim finds its row by it alone
//	record_version  encoding version, 1
//	claim_nonce     ownership token of the current claim
//	status          in_progress | completed | failed
//	attempt_count   claim number: the fencing token
//	payload_hash    payload hash given at claim time ('' if none)
//	result          BYTEA / LONGBLOB, NULL if none
//	error_message   stored failure, NULL if none
//	error_type      its type name
//	started_at, heartbeat_at, completed_at, expires_at
//	                BIGINT Unix milliseconds; completed_at is 0 while in
//	                progress; the row counts while expires_at > now
//	taken_over_at   when the current claim took over a stale one, 0 if it
//	                did not (the takeover rate is a query away)
//	takeover_ms     the owner's takeover threshold, written at claim and
//	                takeover; a claim is stale when its heartbeat is at
//	                least this old (the caller's threshold counts only
//	                for a row with 0)
//	INDEX (expires_at), used by Purge
//
// MySQL tables use utf8mb4_bin, so keys and nonces compare byte for byte,
// except that the collation ignores trailing spaces; a key, nonce, payload
// hash, tenant or scope with a trailing space, a NUL byte or invalid UTF-8
// (which MySQL's INSERT IGNORE would silently cut short) is refused.
// Decoding is strict: an unknown record_version or status, an empty nonce,
// an attempt below 1, a failed row without a message is a
// *idem.CorruptRecordError. A claim never overwrites such a row (the
// statements only replace rows they can read); Delete removes it.
//
// # Statements and round trips
//
// Statements are prepared once per connection (on first use) and then cost
// one round trip each. Claim applies the rules of storekit.DecideClaim
// natively:
//
// PostgreSQL. Claim is one statement: a CTE reads the row; when there is
// none, or it has expired, or it is a stale in-progress claim with the same
// payload hash, INSERT ... ON CONFLICT (tenant, scope, key_hash) DO UPDATE
// ... WHERE <the same conditions> RETURNING writes the claim (attempt =
// previous + 1 on a re-claim or takeover); otherwise, and when the
// conditional update did nothing, the statement returns the existing row.
// A replay of a completed key is therefore one read-only round trip (no row
// lock, no WAL flush). Heartbeat, Complete and Release are one UPDATE each,
// conditioned on claim_nonce (and status = in_progress for heartbeat and
// release); zero rows is idem.ErrLostOwnership.
//
// Under READ COMMITTED the upsert decides on the newest committed version
// of the row, but the CTE's read sees the statement's snapshot, which can
// be older: a row inserted by a concurrent claim after the snapshot, or a
// version that has since changed. The store detects both (no row returned;
// or a returned row that DecideClaim says is claimable) and sends the
// statement again; a live, unclaimable snapshot row was the row's state at
// a moment inside the call and is returned as it is. So a claim that loses
// a race on a brand-new key can take two round trips; the tests see this
// in about half of the losers when 16 claims start on one new key at once.
//
// MySQL/MariaDB. The dialect has no RETURNING, so Claim is an INSERT IGNORE
// of a fresh claim (one round trip when the key is new) and, when the key
// exists, a SELECT of the row; when the row is claimable, an UPDATE writes
// the DecideClaim outcome conditioned on the row being exactly as read
// (claim_nonce, attempt_count, status, heartbeat_at, expires_at: a
// compare-and-swap; a lost race starts over). MySQL counts an UPDATE that
// writes the values a row already has as zero affected rows, so a zero from
// Heartbeat, Complete or Release is checked with a SELECT before it
// becomes idem.ErrLostOwnership (a retried complete succeeds).
//
// Round trips per operation (TestRoundTrips counts them on the wire):
//
//	                      PostgreSQL   MySQL/MariaDB
//	Claim, new key        1            1 (INSERT IGNORE)
//	Claim, live key       1            2 (INSERT IGNORE, SELECT)
//	Claim, re-claim or    1            3 (INSERT IGNORE, SELECT, UPDATE)
//	  takeover
//	Heartbeat, Complete,  1            1 (2 when no row changed: same
//	  Release                          values, or ownership lost)
//	Get, Delete, Purge    1            1
//
// A guarded fresh call is two round trips on both (claim, complete); a
// replay of a completed key is one on PostgreSQL and two on MySQL. The
// first use of a statement on a connection adds the round trip that
// prepares it.
//
// # Time
//
// Expiry and staleness are decided with the caller's clock (WithClock,
// default time.Now), passed into every statement as a parameter; the
// database's clock is never used. Clock skew between callers shifts
// decisions: a caller whose clock is ahead by s sees a heartbeat s older
// than it is and takes a claim over s early, so takeover stays safe while
// skew + heartbeat interval + statement latency stays below the takeover
// threshold (with a 5s heartbeat and 30s takeover, about 20s of skew). A
// released row (expires_at = the releaser's now) looks live to a caller
// whose clock is behind until its clock catches up.
//
// # Purge
//
// Rows are never deleted by expiry; an expired row is ignored by every
// operation and overwritten by the next claim of its key, which continues
// its attempt numbers. Purge deletes the rows, of every tenant and scope,
// whose expires_at is older than now minus the retention (WithRetention,
// default one minute), with one DELETE on the expires_at
// index; after that, a new claim of a purged key starts again at attempt 1.
// Run it from a periodic job.
//
// # Errors
//
// Database errors are returned as *idem.StoreError wrapping the driver's
// error (errors.As finds *pgconn.PgError or *mysql.MySQLError; the store itself
// imports neither driver, so a PostgreSQL program does not link the MySQL
// driver). A value the
// database refuses (SQLSTATE class 22: too long for its column, not valid
// UTF-8, a NUL byte in PostgreSQL text) or a statement over MySQL's packet
// limit is marked permanent (it matches idem.ErrPermanent), so a Guard does
// not retry the completion. A MySQL deadlock inside a claim is retried. Option mistakes are *OptionError
// matching idem.ErrInvalidOption, from New. Keys longer than 255 bytes are
// an idem.ErrInvalidKey, nonces longer than 64 bytes and payload hashes
// longer than 255 bytes are refused before any statement, so MySQL never
// truncates a value.
package sqlstore
