// Package sqlstore keeps idem's records in a PostgreSQL, MySQL/MariaDB or
// SQLite table, through database/sql. Open the database, make the store,
// create its table once, and hand the store to idem.New:
//
//	db, err := sql.Open("pgx", dsn) // github.com/jackc/pgx/v5/stdlib
//	store, err := sqlstore.New(db, sqlstore.Postgres)
//	err = store.Migrate(ctx) // CREATE TABLE / INDEX IF NOT EXISTS
//	defer store.Close()      // stops the store's clean-up; db stays open
//	g, err := idem.New[Invoice](store)
//	inv, err := g.Do(ctx, key, createInvoice)
//
// For MySQL or MariaDB open the database with
// github.com/go-sql-driver/mysql and pass sqlstore.MySQL (Migrate then
// also creates the table's claim procedure: it needs the CREATE ROUTINE
// privilege, callers EXECUTE). For a program without a database server,
// sqlstore.SQLite keeps the table in a local SQLite file (3.42 or later,
// through the pure-Go modernc.org/sqlite, no cgo):
//
//	db, err := sql.Open("sqlite", "file:/var/lib/app/idem.db?"+sqlstore.SQLiteDSNParams)
//	store, err := sqlstore.New(db, sqlstore.SQLite)
//	err = store.Migrate(ctx) // WAL mode, then CREATE TABLE / INDEX IF NOT EXISTS
//
// On PostgreSQL and MySQL each process holds a session lock on one
// connection of its own, so a claim left by a process that died is taken
// over at once; SQLite waits for the takeover threshold (see Dead owners
// in docs/sqlstore.md).
//
// On PostgreSQL through pgx, store.Listen() returns a WatchingStore whose
// waiters are woken by LISTEN/NOTIFY; on MySQL and SQLite waiters poll.
//
// DoTx runs a guarded fn inside a database transaction and commits the
// completed record in it, so fn's writes to the same database and the
// outcome commit together or not at all; StepTx does the same for one
// step of a call.
//
// # Options
//
// WithTable names the table (default "idempotency_keys"). WithRetention
// sets how long a row is kept once expired (default one minute), so the
// attempt number, the fencing token, keeps counting while it is there.
// The store removes such rows itself while it is open, about every
// DefaultCleanup (30 seconds), in small batches, one process at a time
// per table; WithCleanup(every) changes the interval, and WithoutCleanup()
// turns it off for a program that runs Purge from a job of its own (the
// idem command's purge does). New does no I/O and reports a bad option as
// an error matching storekit.ErrInvalidOption.
//
// # What to know in production
//
// Freshness, staleness and expiry are decided by the database's clock,
// inside the statements, so application hosts whose clocks disagree still
// agree on every decision; there is no WithClock. A fresh call is two
// round trips (claim, complete) and a replay of a completed key one, on
// every dialect (two on MySQL until Migrate has created the claim
// procedure); each statement is prepared once per connection.
//
// SQLite runs one writer at a time: DoTx and StepTx hold the file's write
// lock while fn runs, so keep fn short (a Step inside DoTx's fn is refused
// at once). The processes of one host may share the file, on a local file
// system only. SQLiteDSNParams sets the busy timeout, WAL and immediate
// transactions that Migrate checks for.
//
// On PostgreSQL the store's clean-up needs autovacuum (its defaults
// suffice) to reuse the space of deleted rows; a server with autovacuum
// off needs VACUUM on the table from a job.
//
// Database errors are returned as *storekit.StoreError wrapping the driver's
// error (errors.As finds *pgconn.PgError or *mysql.MySQLError; the package
// links neither driver). A value the database refuses is permanent
// (storekit.ErrPermanent) and not retried; deadlocks, lock wait timeouts and
// serialization failures are sent again with a capped backoff. Storage
// keys longer than MaxKeyLen (255 bytes; a Guard's are 69) are refused.
//
// The table's columns, each statement and its round trips, the clock,
// LISTEN/NOTIFY, the transactions' locks, the clean-up's batches and what
// they cost are described in [docs/sqlstore.md].
//
// [docs/sqlstore.md]: https://github.com/idem-go/idem/blob/main/docs/sqlstore.md
package sqlstore
