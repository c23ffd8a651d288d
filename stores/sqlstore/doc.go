// Package sqlstore is an idem.Store kept in a PostgreSQL, MySQL/MariaDB or
// SQLite table, through database/sql:
//
//	db, _ := sql.Open("pgx", dsn) // github.com/jackc/pgx/v5/stdlib
//	store, err := sqlstore.New(db, sqlstore.Postgres)
//	err = store.Migrate(ctx)       // CREATE TABLE / INDEX IF NOT EXISTS (MySQL: and its claim procedure)
//	g, err := idem.New[Invoice](store)
//
// For MySQL or MariaDB use github.com/go-sql-driver/mysql and
// sqlstore.MySQL. On PostgreSQL through pgx, store.Listen() returns a
// WatchingStore whose waiters are woken by LISTEN/NOTIFY (see Push
// wake-ups).
//
// # SQLite
//
// For a program without a database server, sqlstore.SQLite keeps the table
// in a SQLite file (3.42 or later) through a pure-Go driver, no cgo:
//
//	db, _ := sql.Open("sqlite", "file:/var/lib/app/idem.db?"+sqlstore.SQLiteDSNParams) // modernc.org/sqlite
//	store, err := sqlstore.New(db, sqlstore.SQLite)
//	err = store.Migrate(ctx) // WAL mode, then CREATE TABLE / INDEX IF NOT EXISTS
//
// SQLiteDSNParams gives every connection a busy timeout (a writer waits
// for another's write lock instead of failing), WAL (readers go on beside
// the writer) and transactions that take the write lock when they begin.
// Migrate puts the file in WAL mode and refuses a connection without a
// busy timeout (an error matching idem.ErrInvalidOption). The processes of
// one host share the file (not a network file system: SQLite's locks need
// a local one). SQLite runs one writer at a time: a claim is one
// transaction that takes the write lock first, reads the row and the
// database's clock (unixepoch('subsec')), decides with
// storekit.DecideClaim and writes; Heartbeat, Complete, Release and Delete
// are one UPDATE or DELETE each; a purge batch is one DELETE ... RETURNING.
// DoTx and StepTx take the write lock before fn runs and hold it until
// they commit, so keep fn short; a Step inside DoTx's fn would wait for
// that lock and is refused at once. A claim cannot be taken from a
// transaction that is open (the taker waits for the lock), and a process
// paused (SIGSTOP) inside DoTx's or StepTx's fn holds the write lock, so
// every writer on the file waits until it resumes or dies (a process that
// dies releases it). Waiters poll (no Listen).
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
//	                BIGINT Unix milliseconds by the database's clock;
//	                completed_at is 0 while in progress; the row counts
//	                while expires_at > the database's now
//	taken_over_at   when the current claim took over a stale one, 0 if it
//	                did not (the takeover rate is a query away)
//	takeover_ms     the owner's takeover threshold, written at claim and
//	                takeover; a claim is stale when its heartbeat is at
//	                least this old (the caller's threshold counts only
//	                for a row with 0)
//	watched         PostgreSQL only: BOOLEAN, set by a waiter's Watch;
//	                only a watched row's changes notify
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
// MariaDB 10.5 and later. Claim is one INSERT ... ON DUPLICATE KEY
// UPDATE key_hash = key_hash RETURNING: a new key is inserted and its row
// returned; an existing row is left as it is (the no-op update only locks
// it for the statement) and returned, with the server's now read after
// that lock. A replay of a completed key, a live claim and a new key are
// therefore one round trip, as on PostgreSQL; when the row is claimable
// (expired, released, stale) an UPDATE writes the DecideClaim outcome
// conditioned on the row being exactly as returned (the compare-and-swap
// below). The store asks the server's version once (SELECT VERSION()).
//
// MySQL (no RETURNING), and MariaDB before 10.5: Claim is an INSERT IGNORE
// of a fresh claim and, when the key exists, a SELECT of the row and the
// server's now, both inside the table's claim procedure, which Migrate
// creates (`<table>_claim_v2`, SQL SECURITY INVOKER: Migrate needs the
// CREATE ROUTINE privilege, callers EXECUTE on it), so that a new key and
// a replay are one round trip (one CALL); each statement of the procedure
// commits on its own, as when they are sent one by one. A store that
// cannot call the procedure (Migrate not run since this version, the
// procedure dropped, or no EXECUTE on it) sends the two statements one by
// one, two round trips for a replay, until Migrate runs again. When the row is
// claimable at that now, an UPDATE writes the DecideClaim outcome
// conditioned on the row being exactly as read (claim_nonce,
// attempt_count, status, heartbeat_at, expires_at: a compare-and-swap; a
// lost race starts over), with the server's now at the UPDATE as its
// times. The INSERT and the UPDATE hand that now back in the OK packet
// (LAST_INSERT_ID(expr), read as Result.LastInsertId; the table has no
// AUTO_INCREMENT column), so the returned record holds the written times
// without another round trip. MySQL counts an UPDATE that
// writes the values a row already has as zero affected rows, so Heartbeat,
// Complete and Release do not read the affected rows there: each assigns
// LAST_INSERT_ID(now) to a column, which only a row the WHERE matched
// evaluates, and the OK packet's insert id (now, or 0 for no match) is the
// answer. No second statement decides it (a SELECT after the UPDATE could
// see a row a concurrent claim of the same nonce wrote since, and report a
// write that never happened; TestOwnedAnswerIsTheUpdates).
//
// A write that waits for a row lock (behind a Release, a Complete, a
// DoTx transaction) judges the row with the database's clock read after
// the wait, not when the statement started (see Time): a heartbeat that
// waited behind its owner's Release finds the record released instead of
// reviving it (TestHeartbeatBehindRelease), and a claim that waited behind
// a Release re-claims the record instead of taking it over
// (TestClaimBehindRelease). On PostgreSQL a claim that meets a row first
// locks it (only when its snapshot says the row is claimable, so a replay
// takes no lock) and reads the clock after that lock, so a new record
// inserted once a concurrent Delete of the key commits carries the time
// after the wait, not the time the statement began (TestClaimBehindDelete).
// MySQL and MariaDB build an inserted row, times included, before InnoDB's
// duplicate check waits for a deleting transaction: a claim inserted
// behind a Delete of the same key carries its statement's start time, so
// its first heartbeat is older than the claim by the Delete's duration
// (reading the clock after a locking read instead cost gap-lock deadlocks
// between claims of new keys).
//
// Round trips per operation (TestRoundTrips counts them on the wire):
//
//	                      PostgreSQL   MariaDB 10.5+   MySQL
//	Claim, new key        1            1               1 (CALL)
//	Claim, live key       1            1               1 (CALL)
//	Claim, re-claim or    1            2               2 (CALL, UPDATE)
//	  takeover
//	(MySQL without the procedure: INSERT IGNORE, then SELECT, then UPDATE:
//	1, 2 and 3)
//	Heartbeat, Complete,  1            1               1
//	  Release
//	Get, Delete           1            1               1
//	Purge, per batch      1            SELECT, then a READ COMMITTED
//	                                   transaction with one DELETE
//	(the clean-up's batch adds GET_LOCK and RELEASE_LOCK on MySQL; see
//	Lifecycle)
//
// A guarded fresh call is two round trips on all (claim, complete); a
// replay of a completed key is one (two on MySQL without the claim
// procedure); TestRoundTrips counts them on the wire for each of the
// three MySQL claims, on MariaDB. The
// first use of a statement on a connection adds the round trip that
// prepares it.
//
// # Time
//
// Freshness, staleness and expiry are decided with the database's clock,
// inside the statements that act on them: PostgreSQL's clock_timestamp()
// and MySQL's UTC_TIMESTAMP(6) (NOW(6) in UTC, free of the session time
// zone). A statement that only reads takes the time once (a materialized
// CTE or an InitPlan on PostgreSQL; on MySQL, after the row is read, as
// below: NOW is fixed when a statement starts, before InnoDB takes the
// read's snapshot, and a read judged by it could see a Release committed
// since with an expires_at later than that now, and take the released
// record for live; TestClaimReadClock, TestClaimReleaseRace). A statement
// that writes reads it where the row is judged,
// after the row lock is held: on PostgreSQL in the UPDATE's WHERE and SET
// (evaluated again for the row version a wait ended on) and in the claim's
// ON CONFLICT DO UPDATE (which locks before it judges); on MySQL as
// UTC_TIMESTAMP(6) plus the time since the statement started
// (SYSDATE(6) - NOW(6)), written once per row and referred to by the other
// columns. The claim's compare-and-swap UPDATE also checks that the row is
// as live at its own now as the claim's decision found it. (SET timestamp
// does not freeze SYSDATE; a server run with --sysdate-is-now judges a
// write that waited, and a read, with its start time; the compare-and-swap
// still refuses a takeover of a row that has expired by then.)
// Times in the row
// stay BIGINT Unix milliseconds. The caller's clock is never read, so
// application hosts whose clocks disagree still agree on every decision
// (TestSkewedProcessClocks: two Guards 2x the takeover threshold apart
// take over nothing live, and a release by the one ahead frees the key at
// once for the one behind). No round trip is added: the claim statement
// returns the database's now with the row it read (PostgreSQL) or hands it
// back in the OK packet (MySQL), Get returns it beside the row, and
// Heartbeat, Complete, Release and Purge compute with it in place.
//
// There is no WithClock: with nothing read from the caller's clock it
// would have no meaning. Tests move a row through time by shifting its
// stored times (or, on MySQL, by freezing a session's clock with SET
// timestamp). The Guard's own timing (heartbeat interval, the lease it
// grants fn) still runs on the process's monotonic clock, which no wall
// clock skew affects.
//
// # Push wake-ups
//
// On PostgreSQL, Complete, Release and Delete notify in the same statement:
// a CTE does the write and the final SELECT calls pg_notify(channel, key)
// for the row it changed if that row is marked watched, so the
// notification is sent when that statement commits, and only if it
// changed a watched row (no extra round trip; TestRoundTrips still counts
// 2 for a fresh call and 1 for a replay). The channel is the table name
// (Store.Channel). Claims, takeovers and heartbeats do not notify.
//
// Watch marks the row watched (one UPDATE, on the waiter's side; the mark
// stays for the row's life, so a takeover keeps it) after its LISTEN is in
// place and before it returns. A completion that commits after the mark
// sees it and notifies; one that committed before is seen by the Guard's
// look after Watch returns (TestWaitRacingCompletion races them). So
// completions nobody waits for send no notification: a notifying commit
// takes PostgreSQL's notification queue lock and writes the queue, which
// BenchmarkNotifyCost measured at about 0.15 ms more per completing
// statement from one goroutine (0.35 against 0.5 ms) and up to about half
// the throughput from eight on two cores.
//
// Store.Listen returns a WatchingStore, an idem.Watcher. Its store keeps
// one listening connection, taken from its *sql.DB on the first Watch and
// kept until Close, which sends LISTEN once and multiplexes every key its
// WatchingStores watch over it; a notification wakes the waiters of its key.
// Watch returns once the LISTEN is in place, so nothing committed after it
// returns is missed. When the connection fails, or does not answer a ping
// after 15s of silence (TestListenSilentDrop black-holes it), every waiter
// is woken, since notifications may have been lost, and the connection is
// re-established with a backoff of 10ms doubling to 1s (setting one up is
// bounded by the same 15s, so a dead pooled connection is given up); a
// Watch meanwhile waits up to 5s for it and then fails, and the Guard
// polls. The Guard keeps its bounded safety poll
// (a quarter of the takeover threshold, at most 5s), which is what finds a
// crashed owner: nothing notifies about it. The connection needs pgx
// (github.com/jackc/pgx/v5/stdlib), reached through database/sql's Raw and
// reflection so that this package links no driver. MySQL has no
// LISTEN; its waiters poll.
//
// The listener reads inside database/sql's Conn.Raw, which locks the
// connection; it lets go every 100ms (a notification in between waits in
// the socket), so closing a statement prepared earlier on that connection
// (another Store's Close on the same *sql.DB) is not held up
// (TestCloseNotHeldByListener).
//
// # Transactions
//
// DoTx runs a guarded fn inside a database transaction and writes the
// completed record in the same transaction, conditioned on the claim's
// nonce, before it commits: fn's writes (in the same database) and the
// outcome commit together or not at all, so a crash in the middle of fn
// leaves neither and a takeover runs fn again on a clean slate; for
// writes in the same database that is exactly once
// (TestDoTxKilledOwner, TestDoTxProcesses). A claim lost while fn's
// transaction is open rolls it back (idem.ErrLostOwnership). A commit
// that fails or is never answered is read back with SELECT ... FOR
// UPDATE, which waits for the transaction holding the record row's lock
// to end: recorded or not, never guessed (TestDoTxCommitReplyLost). The
// heartbeat runs on other connections and never waits for fn's
// transaction, which locks the record row only after fn returned and the
// heartbeat was stopped. See DoTx for the locks and what it costs:
// PostgreSQL, a fresh DoTx whose fn does one INSERT is 5 round trips
// against 3 for the same INSERT in a plain transaction (claim and
// completion added; BenchmarkDoTx).
//
// StepTx is the same for one step of a call: fn's writes and the step's
// completed record commit in one transaction, conditioned on the step
// claim's nonce, so a call that also makes external calls is g.Do with a
// Step for each of them and a StepTx for its writes, and holds no
// transaction open while they run. A StepTx that runs is its claim plus
// its transaction with the completion UPDATE inside (PostgreSQL, one
// INSERT: 5 round trips against 3 for a plain transaction); replayed, 1
// (TestStepTxRoundTrips). TestStepTxProcesses kills its owner inside fn,
// between the completion and the COMMIT, and after the commit, and stops
// it inside fn until another process finished the call: one row each
// time, earlier steps never repeated.
//
// # Lifecycle
//
// An expired row is ignored by every operation and overwritten by the
// next claim of its key, which continues its attempt numbers (the fencing
// token) while the row is there. A row is deleted once it has been
// expired for longer than the retention (WithRetention, default one
// minute), judged in the DELETE itself, row by row, on the database's
// clock; a claim, heartbeat or completion that revives or extends the row
// meanwhile keeps it (TestPurgeRacesClaims, storetest's PurgeRace). After
// that, a new claim of the key starts again at attempt 1.
//
// The store deletes such rows by itself while it is open: about every
// DefaultCleanup (30 seconds; each wait drawn from [15s, 45s)), a pass
// removes every row expired past retention. WithCleanup(every) changes
// the interval, WithoutCleanup() runs none, and Close stops it (Close
// never closes the *sql.DB). A Store dropped without Close stops its
// clean-up when it is collected, but call Close. Processes sharing a
// table clean one at a time: each batch of a pass first takes the
// table's try-lock (PostgreSQL pg_try_advisory_xact_lock, MySQL
// GET_LOCK(name, 0), named after the table and, on MySQL, the database),
// and the pass ends when another session holds it (SQLite's write lock
// serializes the batches instead).
//
// A user with a job of their own (cron, the idem CLI's purge) opens the
// store WithoutCleanup and calls Purge, which deletes the same rows the
// same way (without the try-lock) and returns how many.
//
// Both delete in batches (100 rows on PostgreSQL, whose smaller commits
// the claims beside them wait behind less; storekit.DefaultPurgeBatch
// elsewhere), resting as long as each batch took, oldest expiry first, on
// the expires_at index, so a pass with nothing expired reads one index
// entry and no live row, and no claim waits on a removal for more than
// one batch:
//
//   - PostgreSQL: one statement per batch. The batch's rows are picked
//     with FOR UPDATE SKIP LOCKED (a row a claim holds is skipped, not
//     waited for) and deleted by primary key, each judged again, its
//     newest version, against the cut-off. The batch commits with
//     synchronous_commit off for its own transaction: a delete lost in a
//     crash is done again by a later pass.
//   - MySQL/MariaDB: a plain SELECT of the batch's keys, a consistent
//     read that locks nothing, then a DELETE by primary key with the
//     expiry checked again, in a READ COMMITTED transaction. No gap or
//     next-key lock is taken on the expires_at index, where new claims
//     insert: a single DELETE by an expires_at range did, and held every
//     claim whose new row fell in the locked gap until it committed
//     (seconds for a large backlog).
//   - SQLite: one DELETE per batch, under the database's write lock, which
//     serializes the batches of every process (no try-lock): a claim waits
//     for one batch at most.
//
// Measured (TestSoakPurgeMillion, IDEM_SOAK=1): removing a large backlog
// takes longer than one DELETE did, but a probe of claims and replays
// beside it stays close to its latency without the removal.
//
// On PostgreSQL the removal writes WAL: about 150 bytes a row, and three
// times that when a checkpoint falls inside it, as every page it touches
// first after a checkpoint is written whole. A million rows are then
// enough to bring the next checkpoint forward on a server with the
// default max_wal_size (1GB), and the checkpoint's fsync of the table's
// files held single claims' commits for 150-200 ms on the test machine's
// disk (the slow claims fell within the "checkpoint complete ... sync="
// lines of the server's log). With max_wal_size at 8GB no checkpoint fell
// within the removal, 141 MB of WAL was written for a million rows, and
// the probe's worst call stayed within 25-62 ms of its worst without the
// removal. Give max_wal_size room for the rows expiring between two
// checkpoints if single slow claims matter; the same holds for any bulk
// write to the database.
//
// Space: on PostgreSQL deleted rows become reusable once autovacuum has
// run on the table (its defaults suffice: batches commit as they go, so
// no long transaction holds vacuum back); on InnoDB once its purge thread
// has run. Neither shrinks the files: under a steady load the table's
// size stops growing instead (TestSoakTablePlateau). On a server with
// autovacuum off, run VACUUM on the table from a job: deleted rows alone
// give no room back, and the table grows with every call.
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
// not retry the completion. A statement the database rolled back for a
// transient reason (a deadlock: MySQL 1213, PostgreSQL 40P01; a lock wait
// timeout, MySQL 1205; a serialization failure, SQLSTATE 40001) is sent
// again, in every operation, with a capped backoff while the call's
// deadline allows. Option mistakes are *idem.OptionError matching
// idem.ErrInvalidOption, from New.
//
// Requests are checked with storekit's rules before any statement is sent
// (storekit.ValidateClaim, ValidateCompletion, ValidateOwner, ValidateKey):
// a claim without a nonce or with a lease or takeover threshold under a
// millisecond, or a completion with an unknown status, a failure without
// its error or a TTL under a millisecond, is a *storekit.RequestError
// matching storekit.ErrInvalidRequest; an empty nonce in a heartbeat,
// complete or release is idem.ErrLostOwnership. The columns add their
// limits: a storage key (the key the store is given: a Guard's is
// idem.StorageKeyPrefix and a 64-digit hex hash, 69 bytes, however long
// the caller's key) longer than MaxKeyLen, 255 bytes, is an
// idem.ErrInvalidKey, which only code calling the Store's methods itself
// can meet (hash a longer key first, as the Guard does); nonces longer
// than 64 bytes are a *storekit.RequestError, and payload hashes longer
// than 255 bytes are refused, so MySQL never truncates a value.
package sqlstore
