package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem/storekit"
)

// Store is an storekit.Store kept in one SQL table. It is safe for concurrent
// use by many goroutines and processes.
type Store struct {
	db      *sql.DB
	dialect Dialect
	cfg     config
	q       queries

	mu    sync.Mutex
	stmts [numStmts]*sql.Stmt

	resent atomic.Int64 // claim statements sent again after a race (tests read it)

	maxPacket atomic.Int64 // MySQL's @@max_allowed_packet, once read (0: not yet)
	returning atomic.Int32 // MySQL: 1 when the server has INSERT ... RETURNING (MariaDB 10.5+), 2 when not, 0 not yet known
	noProc    atomic.Bool  // MySQL: the claim procedure cannot be called (missing, or no EXECUTE); Migrate clears it

	lmu sync.Mutex
	lis *listener // the listening connection of Listen, started by the first Watch

	presOnce sync.Once
	pres     *presence // this process's presence in the database (Owner), nil without one

	purger  *purger           // Purge and the clean-up
	cleaner *storekit.Cleaner // the clean-up goroutine; nil under WithoutCleanup
}

var _ storekit.Store = (*Store)(nil)

// New returns a store over db. It does no I/O: Migrate creates the table,
// and statements are prepared on first use. A dialect that is not the one
// of db's driver (pgx or lib/pq: Postgres; go-sql-driver/mysql: MySQL;
// modernc.org/sqlite, mattn/go-sqlite3 or ncruces/go-sqlite3: SQLite) is
// an invalid argument, and so is, at Migrate, one that is not the
// database's (as its version() tells). Unless WithoutCleanup is
// given, it starts the store's clean-up goroutine (see Lifecycle in
// docs/sqlstore.md), whose first pass comes after about one
// interval; Close stops it. A nil db, an unknown dialect
// and every invalid option are reported, joined, each an
// *storekit.OptionError matching storekit.ErrInvalidOption.
func New(db *sql.DB, dialect Dialect, opts ...Option) (*Store, error) {
	cfg := config{Options: storekit.Options{Store: "sqlstore", Retention: DefaultRetention, Cleanup: DefaultCleanup}, table: DefaultTable}
	if db == nil {
		cfg.Invalid("New", "*sql.DB is nil")
	}
	if dialect != Postgres && dialect != MySQL && dialect != SQLite {
		cfg.Invalid("New", "unknown dialect %d", int(dialect))
	} else if db != nil {
		if d, pkg, ok := driverDialect(db); ok && d != dialect {
			cfg.Invalid("New", "%s", dialectMismatch(dialect, d, "driver "+pkg))
		}
	}
	for _, o := range opts {
		if o == nil {
			cfg.Invalid("New", "nil option")
			continue
		}
		o(&cfg)
	}
	if err := cfg.Err(); err != nil {
		return nil, err
	}
	s := &Store{db: db, dialect: dialect, cfg: cfg, q: buildQueries(dialect, cfg.table),
		purger: newPurger(db, dialect, cfg.table, cfg.Retention)}
	if !cfg.NoCleanup {
		// The goroutine holds the purger, not s: a Store dropped without
		// Close is collected, and its clean-up stopped.
		s.cleaner = storekit.StartCleaner("sqlstore", cfg.Cleanup, cfg.logger, s.purger.pass)
		runtime.AddCleanup(s, func(c *storekit.Cleaner) { go c.Close() }, s.cleaner)
	}
	return s, nil
}

// Validate reports an invalid configuration. A store returned by New is
// always valid; the method lets idem.New check any store the same way.
func (s *Store) Validate() error {
	if s == nil || s.db == nil {
		return &storekit.OptionError{Option: "sqlstore.Store", Reason: "nil or zero Store: use sqlstore.New"}
	}
	return nil
}

// Table returns the table name.
func (s *Store) Table() string { return s.cfg.table }

// Dialect returns the store's dialect.
func (s *Store) Dialect() Dialect { return s.dialect }

// Migrate creates the table and its expires_at index if they do not exist,
// and on MySQL the table's claim procedure (see the package documentation:
// it needs the CREATE ROUTINE privilege, and callers EXECUTE). It is safe
// to run at every start; run it from one process at a time (concurrent
// CREATE TABLE IF NOT EXISTS can fail on PostgreSQL). It creates no
// schema: a table in a schema that does not exist is an error matching
// ErrNoSchema. It first asks the database what it is (version()), and a
// store whose dialect is not the database's is an *storekit.OptionError
// naming the dialect to use.
func (s *Store) Migrate(ctx context.Context) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if d, version, ok := serverDialect(ctx, s.db); ok && d != s.dialect {
		return &storekit.OptionError{Option: "sqlstore.Migrate", Reason: dialectMismatch(s.dialect, d, "version() says "+version)}
	}
	if s.dialect == SQLite {
		if err := s.migrateSQLite(ctx); err != nil {
			return err
		}
	}
	for _, q := range s.q.create {
		// Sent again after a transient refusal: SQLite answers
		// SQLITE_BUSY at once, without its busy handler, to a schema
		// change racing another connection's.
		if err := retryTransient(ctx, func() error { _, err := s.db.ExecContext(ctx, q); return err }); err != nil {
			if noSchema(err) {
				err = fmt.Errorf("%w: %w", ErrNoSchema, err)
			}
			return fmt.Errorf("sqlstore: migrate %s: %w", s.cfg.table, err)
		}
	}
	if err := s.addOwnerColumn(ctx); err != nil {
		return err
	}
	if s.q.proc != "" {
		_, err := s.db.ExecContext(ctx, s.q.proc)
		if n, _, ok := mysqlServerError(err); ok && n == errProcExists {
			err = nil // made before (its name holds its version)
		}
		if err != nil {
			return fmt.Errorf("sqlstore: migrate %s: create the claim procedure %s (the account needs the CREATE ROUTINE privilege): %w",
				s.cfg.table, claimProcedure(s.cfg.table), err)
		}
	}
	s.noProc.Store(false)
	return nil
}

// addOwnerColumn adds the owner column to a table made before it came
// (an empty owner: a claim whose owner is not known), when a read of the
// column fails.
func (s *Store) addOwnerColumn(ctx context.Context) error {
	t, _ := quote(s.dialect, s.cfg.table)
	rows, err := s.db.QueryContext(ctx, "SELECT owner FROM "+t+" WHERE 1 = 0")
	if err == nil {
		return rows.Close()
	}
	typ := "TEXT NOT NULL DEFAULT ''"
	if s.dialect == MySQL {
		typ = "VARCHAR(255) NOT NULL DEFAULT ''"
	}
	err = retryTransient(ctx, func() error {
		_, err := s.db.ExecContext(ctx, "ALTER TABLE "+t+" ADD COLUMN owner "+typ)
		return err
	})
	if err != nil {
		if rows, rerr := s.db.QueryContext(ctx, "SELECT owner FROM "+t+" WHERE 1 = 0"); rerr == nil {
			return rows.Close() // added by a concurrent Migrate
		}
		return fmt.Errorf("sqlstore: migrate %s: add the owner column: %w", s.cfg.table, err)
	}
	return nil
}

// MySQL server errors about stored procedures.
const (
	errProcExists  = 1304 // ER_SP_ALREADY_EXISTS
	errProcMissing = 1305 // ER_SP_DOES_NOT_EXIST
	errProcDenied  = 1370 // ER_PROCACCESS_DENIED_ERROR: no EXECUTE on it (also said of one that does not exist)
)

// procUnusable reports an error that says the claim procedure cannot be
// called: it is missing, or the account may not execute it.
func procUnusable(err error) bool {
	n, _, ok := mysqlServerError(err)
	return ok && (n == errProcMissing || n == errProcDenied)
}

// Close stops the store's clean-up (waiting for a batch in flight to
// end), and closes its prepared statements and its listening connection
// (see Listen), waking every watcher. It does not close the *sql.DB, which
// belongs to the caller. The store prepares the statements again, and
// listens again, if it is used after Close; the clean-up stays stopped
// (Purge still works).
func (s *Store) Close() error {
	_ = s.cleaner.Close()
	s.stopListener()
	s.mu.Lock()
	stmts := s.stmts
	s.stmts = [numStmts]*sql.Stmt{}
	s.mu.Unlock()
	var errs []error // closed outside s.mu: see keepStmt
	for _, st := range stmts {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	return errors.Join(errs...)
}

// stmt returns the prepared statement id, preparing it on first use. A
// failed preparation is not cached. The lock is not held while preparing,
// so a preparation stuck on an unreachable database (until its caller's
// deadline) does not hold up other calls past their own deadlines.
func (s *Store) stmt(ctx context.Context, id stmtID) (*sql.Stmt, error) {
	s.mu.Lock()
	st := s.stmts[id]
	s.mu.Unlock()
	if st != nil {
		return st, nil
	}
	st, err := s.db.PrepareContext(ctx, s.q.text[id])
	if err != nil {
		return nil, err
	}
	return s.keepStmt(id, st), nil
}

// keepStmt caches st, just prepared, as statement id, and returns it; or,
// when another call prepared id meanwhile, returns that one and closes st.
// Closing a statement waits for every connection it was prepared on to be
// free, and a connection may stay busy for as long as a transaction or a
// lock wait on it lasts: st is closed in the background, never under s.mu,
// which the holder of such a connection may need to end it
// (TestStmtCloseDoesNotBlock).
func (s *Store) keepStmt(id stmtID, st *sql.Stmt) *sql.Stmt {
	s.mu.Lock()
	prev := s.stmts[id]
	if prev == nil {
		s.stmts[id] = st
	}
	s.mu.Unlock()
	if prev == nil {
		return st
	}
	go func() { _ = st.Close() }()
	return prev
}

// failureColumns is a recorded failure as the error_message and
// error_type columns: NULL when there is none.
func failureColumns(e *storekit.RecordedFailure) (msg, typ any) {
	if e == nil {
		return nil, nil
	}
	return e.Message, e.Type
}

func (s *Store) exec(ctx context.Context, id stmtID, args ...any) (int64, error) {
	res, err := s.execResult(ctx, id, args...)
	if err != nil {
		return 0, err
	}
	return res.RowsAffected()
}

// execResult runs statement id, sending it again after a transient error.
func (s *Store) execResult(ctx context.Context, id stmtID, args ...any) (sql.Result, error) {
	st, err := s.stmt(ctx, id)
	if err != nil {
		return nil, err
	}
	var res sql.Result
	err = retryTransient(ctx, func() error {
		res, err = st.ExecContext(ctx, args...)
		return err
	})
	return res, err
}

// Backoff bounds between sends of a statement the database refused for a
// transient reason.
const (
	retryMin = 2 * time.Millisecond
	retryMax = 100 * time.Millisecond
)

// retryTransient runs f again while it fails with a transient error
// (transient), sleeping a jittered, capped, doubling backoff between tries,
// until it succeeds, fails otherwise, or ctx ends (then the last error is
// returned).
func retryTransient(ctx context.Context, f func() error) error {
	backoff := retryMin
	for {
		err := f()
		if err == nil || !transient(err) {
			return err
		}
		d := backoff/2 + rand.N(backoff/2+1)
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
			return err
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		backoff = min(2*backoff, retryMax)
	}
}

// transient reports an error after which the database rolled the
// statement back and sending it again can succeed: a MySQL/MariaDB
// deadlock (1213) or lock wait timeout (1205), a serialization failure
// (SQLSTATE 40001) or a PostgreSQL deadlock (40P01).
func transient(err error) bool {
	if n, state, ok := mysqlServerError(err); ok {
		return n == 1213 || n == 1205 || state == "40001"
	}
	if sqliteBusy(err) {
		return true
	}
	var se interface{ SQLState() string }
	if errors.As(err, &se) {
		c := se.SQLState()
		return c == "40001" || c == "40P01"
	}
	return false
}

// ErrNoTable is matched (errors.Is) by the error of an operation on a table
// that does not exist: Store.Migrate, which creates it, has not run (or ran
// with another WithTable). It comes wrapped in an *storekit.StoreError, beside
// the driver's error.
var ErrNoTable = errors.New("sqlstore: the table does not exist (call Store.Migrate to create it)")

// ErrNoSchema is matched (errors.Is) by the error of Store.Migrate when
// the schema of a schema-qualified table (WithTable("schema.table"); on
// MySQL a database, on SQLite an attached database) does not exist:
// Migrate creates the table, not its schema.
var ErrNoSchema = errors.New("sqlstore: the table's schema does not exist (create it, or name another in WithTable)")

// noSchema reports a database error that says a schema does not exist:
// PostgreSQL's invalid_schema_name (SQLSTATE 3F000), MySQL's
// ER_BAD_DB_ERROR (1049), SQLite's "unknown database".
func noSchema(err error) bool {
	if n, _, ok := mysqlServerError(err); ok {
		return n == 1049
	}
	if sqliteNoSchema(err) {
		return true
	}
	var se interface{ SQLState() string }
	return errors.As(err, &se) && se.SQLState() == "3F000"
}

func storeErr(op string, err error) error {
	if noTable(err) {
		err = fmt.Errorf("%w: %w", ErrNoTable, err)
	}
	return &storekit.StoreError{Op: op, Err: err, Permanent: permanent(err)}
}

// noTable reports a database error that says the table does not exist:
// PostgreSQL's undefined_table (SQLSTATE 42P01), MySQL's ER_NO_SUCH_TABLE
// (1146).
func noTable(err error) bool {
	if n, _, ok := mysqlServerError(err); ok {
		return n == 1146
	}
	if sqliteNoTable(err) {
		return true
	}
	var se interface{ SQLState() string }
	return errors.As(err, &se) && se.SQLState() == "42P01"
}

// permanent reports a database error that sending the same values again
// cannot fix: a data exception (SQLSTATE class 22: a value too long for its
// column, text that is not valid UTF-8 or, on PostgreSQL, holds a NUL
// byte, a number out of range), or a statement over MySQL's packet limit.
func permanent(err error) bool {
	if n, state, ok := mysqlServerError(err); ok {
		return strings.HasPrefix(state, "22") || n == 1153 // ER_NET_PACKET_TOO_LARGE
	}
	if mysqlPacketTooLarge(err) {
		return true
	}
	var se interface{ SQLState() string } // *pgconn.PgError, *pq.Error
	return errors.As(err, &se) && strings.HasPrefix(se.SQLState(), "22")
}

// checked wraps the verdict of a storekit check of an op on key, keeping
// what it matches (storekit.ErrInvalidKey, storekit.ErrInvalidRequest,
// storekit.ErrLostOwnership).
func checked(op, key string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("sqlstore: %s %s: %w", op, key, err)
}

// checkKey validates a storage key: storekit's rule, then the column's
// (its length, and text the database keeps and compares byte for byte).
func (s *Store) checkKey(op, key string) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if err := storekit.ValidateKey(key); err != nil {
		return checked(op, key, err)
	}
	var why string
	if len(key) > MaxKeyLen {
		why = fmt.Sprintf("storage key (the key given to the store) longer than %d bytes: "+
			"a Guard's are 69 bytes whatever its caller's key; hash a longer key before giving it to the store", MaxKeyLen)
	} else if p := textProblem(key); p != "" {
		why = "storage key: " + p
	}
	if why != "" {
		return checked(op, key, &storekit.KeyError{Reason: why})
	}
	return nil
}

// checkOwner validates the key and nonce of a heartbeat, complete or
// release: storekit.ValidateOwner (an empty nonce is storekit.ErrLostOwnership),
// then the key's column rules.
func (s *Store) checkOwner(op, key, nonce string) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if err := checked(op, key, storekit.ValidateOwner(key, nonce)); err != nil {
		return err
	}
	return s.checkKey(op, key)
}

// checkNonce applies the nonce column's rules to a claim's nonce, which
// storekit.ValidateClaim has found not empty.
func checkNonce(nonce string) error {
	why := textProblem(nonce)
	if len(nonce) > MaxNonceLen {
		why = fmt.Sprintf("longer than %d bytes", MaxNonceLen)
	}
	if why == "" {
		return nil
	}
	return &storekit.RequestError{Op: "claim", Field: "Nonce", Reason: why}
}

// keyArgs are the arguments that find a row: its storage key, which is
// unique across tenants and scopes (the Guard hashes them into it).
func (s *Store) keyArgs(key string) []any { return []any{key} }

// maxClaimRounds bounds how often Claim starts over after a concurrent
// change made its view of the row out of date; every round means another
// caller changed the key.
const maxClaimRounds = 16

// ErrContention is returned (wrapped in *storekit.StoreError) when Claim keeps
// losing races on one key.
var ErrContention = errors.New("sqlstore: claim kept losing to concurrent writes")

// checkClaim checks a claim request before anything is sent.
func (s *Store) checkClaim(ctx context.Context, req storekit.ClaimRequest) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if err := checked("claim", req.Key, storekit.ValidateClaim(req)); err != nil {
		return err
	}
	if err := s.checkKey("claim", req.Key); err != nil {
		return err
	}
	if err := checked("claim", req.Key, checkNonce(req.Nonce)); err != nil {
		return err
	}
	if err := s.soleConnection(ctx); err != nil {
		return err
	}
	if len(req.PayloadHash) > MaxPayloadLen {
		return storeErr("claim", fmt.Errorf("payload hash longer than %d bytes", MaxPayloadLen))
	}
	if why := textProblem(req.PayloadHash); why != "" {
		return storeErr("claim", errors.New("payload hash: "+why))
	}
	if len(req.Tenant) > MaxTenantLen {
		return storeErr("claim", fmt.Errorf("tenant longer than %d bytes", MaxTenantLen))
	}
	if len(req.Scope) > MaxScopeLen {
		return storeErr("claim", fmt.Errorf("scope longer than %d bytes", MaxScopeLen))
	}
	if why := textProblem(req.Tenant); why != "" {
		return storeErr("claim", errors.New("tenant: "+why))
	}
	if why := textProblem(req.Scope); why != "" {
		return storeErr("claim", errors.New("scope: "+why))
	}
	if len(req.Owner) > MaxOwnerLen {
		return storeErr("claim", fmt.Errorf("owner longer than %d bytes (a shorter instance ID)", MaxOwnerLen))
	}
	if why := textProblem(req.Owner); why != "" {
		return storeErr("claim", errors.New("owner: "+why))
	}
	return nil
}

// Claim implements storekit.Store (see docs/sqlstore.md for the
// statements each dialect sends).
func (s *Store) Claim(ctx context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, error) {
	if err := s.checkClaim(ctx, req); err != nil {
		return storekit.ClaimResult{}, err
	}
	for range maxClaimRounds {
		var (
			res  storekit.ClaimResult
			done bool
			err  error
		)
		switch s.dialect {
		case SQLite:
			return s.claimSQLite(ctx, req)
		case Postgres:
			res, done, err = s.claimPostgres(ctx, req)
		default:
			res, done, err = s.claimMySQL(ctx, req)
		}
		if err != nil {
			return storekit.ClaimResult{}, err
		}
		if done {
			return res, nil
		}
		s.resent.Add(1)
		if err := ctx.Err(); err != nil {
			return storekit.ClaimResult{}, storeErr("claim", err)
		}
	}
	return storekit.ClaimResult{}, storeErr("claim", ErrContention)
}

// claimPostgres sends the one claim statement. done is false when the
// statement's answer is out of date and it must be sent again.
//
// Under READ COMMITTED, INSERT ... ON CONFLICT DO UPDATE decides on the
// newest committed version of the row (waiting for a concurrent writer to
// finish), but a plain read in the same statement sees the snapshot taken
// when the statement started. So when the conditional update does nothing,
// the row the second branch returns may be older than the one the conflict
// check saw: absent (inserted concurrently), or a version that would have
// been claimable. Both are detected (no row; or storekit.DecideClaim on the
// returned row says it is claimable) and the statement is sent again; a
// row that is live and not claimable was the row's true state at the
// snapshot, a moment inside this call, so returning it as Existing is
// correct.
func (s *Store) claimPostgres(ctx context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, bool, error) {
	a, err := s.sendClaimPostgres(ctx, req, nil)
	if err != nil || a.met == nil {
		return a.res, a.done, err
	}
	// Another process's live claim: the claim is sent again, allowed to
	// take over that claim (its nonce) and no other if its owner is gone
	// (owner_gone.sql). If the row changed meanwhile, the answer is the
	// new row's.
	a, err = s.sendClaimPostgres(ctx, req, a.met)
	return a.res, a.done, err
}

// pgClaim is one claim statement's answer: res when done, else the
// statement is sent again, allowed to take over the claim met if its
// owner is gone, when met is not nil.
type pgClaim struct {
	res  storekit.ClaimResult
	done bool
	met  *pgMet
}

// pgMet is a live claim of another process that a claim met: its nonce,
// and the presence token whose lock says whether its owner is alive (""
// when it is gone for another reason: an earlier incarnation of the
// claiming process's instance).
type pgMet struct{ nonce, token string }

// sendClaimPostgres sends the claim statement once: stClaim, or, with met,
// stClaimGone, which may take over that claim if its owner is gone. The
// plain claim reads no lock: only a claim that met another process's live
// claim of the same payload pays for the owner check, with a second
// statement, which is also the takeover.
func (s *Store) sendClaimPostgres(ctx context.Context, req storekit.ClaimRequest, met *pgMet) (pgClaim, error) {
	id, args := stClaim, []any{req.Tenant, req.Scope, req.Key, req.Nonce, req.PayloadHash,
		req.LeaseTTL.Milliseconds(), req.TakeoverAfter.Milliseconds(), req.Owner}
	if met != nil {
		id, args = stClaimGone, append(args, met.nonce, met.token)
	}
	st, err := s.stmt(ctx, id)
	if err != nil {
		return pgClaim{}, storeErr("claim", err)
	}
	rows, err := st.QueryContext(ctx, args...)
	if err != nil && transient(err) && ctx.Err() == nil {
		return pgClaim{}, nil // rolled back: Claim sends it again
	}
	if err != nil {
		return pgClaim{}, storeErr("claim", err)
	}
	defer rows.Close()
	if !rows.Next() {
		if err := rows.Err(); err != nil {
			return pgClaim{}, storeErr("claim", err)
		}
		return pgClaim{}, nil // inserted concurrently, after our snapshot
	}
	var src string
	var now int64 // the server's clock when the statement ran
	var live bool // a row written took over one live and not stale
	var raw rawRecord
	if err := rows.Scan(append([]any{&src, &now, &live}, raw.dest()...)...); err != nil {
		return pgClaim{}, storeErr("claim", err)
	}
	if err := rows.Close(); err != nil {
		return pgClaim{}, storeErr("claim", err)
	}
	rec, err := raw.record(req.Key)
	if err != nil {
		return pgClaim{}, err
	}
	if src == "w" {
		if raw.takenOverAt != 0 {
			return pgClaim{res: storekit.ClaimResult{Outcome: storekit.TookOver, Record: rec, OwnerGone: live}, done: true}, nil
		}
		return pgClaim{res: storekit.ClaimResult{Outcome: storekit.Claimed, Record: rec}, done: true}, nil
	}
	// DecideClaim takes an earlier incarnation's claim over by itself
	// (met, with no token); another owner's live claim is met with its
	// token, once.
	d := storekit.DecideClaim(rec, req, now)
	switch {
	case d.Write && d.OwnerGone && met == nil:
		return pgClaim{met: &pgMet{nonce: rec.Nonce}}, nil
	case d.Write:
		return pgClaim{}, nil // snapshot older than the row the upsert saw
	case met == nil && rec.Status == storekit.StatusInProgress && rec.PayloadHash == req.PayloadHash &&
		rec.Owner != "" && rec.Owner != req.Owner && storekit.OwnerToken(rec.Owner) != "":
		return pgClaim{met: &pgMet{nonce: rec.Nonce, token: storekit.OwnerToken(rec.Owner)}}, nil
	}
	return pgClaim{res: d.Result(), done: true}, nil // untouched, ours already, or its owner lives
}

// claimMySQL: INSERT IGNORE of a fresh claim; if the key exists, read the
// row, decide with storekit.DecideClaim, and when it is claimable write the
// decision with an UPDATE conditioned on the row being exactly as read
// (nonce, attempt, status, heartbeat, expiry: a compare-and-swap). done is
// false when the row changed between the statements.
func (s *Store) claimMySQL(ctx context.Context, req storekit.ClaimRequest) (storekit.ClaimResult, bool, error) {
	var (
		cur  *storekit.Record
		now  int64
		gone bool // cur's owner is known gone (owner_gone.sql)
		err  error
	)
	switch {
	case s.hasReturning(ctx):
		cur, now, gone, err = s.claimReturning(ctx, req)
	case !s.noProc.Load():
		var wrote bool
		cur, now, gone, wrote, err = s.claimProcedure(ctx, req)
		if procUnusable(err) {
			s.noProc.Store(true) // not migrated since the procedure came, or no EXECUTE: claim in two statements
			return storekit.ClaimResult{}, false, nil
		}
		if errors.Is(err, errNoRow) {
			return storekit.ClaimResult{}, false, nil // deleted since the insert
		}
		if err == nil && wrote {
			return storekit.DecideClaim(nil, req, now).Result(), true, nil
		}
	default:
		var ins sql.Result
		ins, err = s.execResult(ctx, stClaim, req.Tenant, req.Scope, req.Key, req.Nonce, req.PayloadHash,
			req.LeaseTTL.Milliseconds(), req.TakeoverAfter.Milliseconds(), req.Owner)
		var n int64
		if err == nil {
			n, err = ins.RowsAffected()
		}
		if err == nil {
			now, err = ins.LastInsertId() // the server's now (LAST_INSERT_ID(expr))
		}
		if err != nil {
			if retryable(err) {
				return storekit.ClaimResult{}, false, nil
			}
			return storekit.ClaimResult{}, false, storeErr("claim", err)
		}
		if n == 1 {
			return storekit.DecideClaim(nil, req, now).Result(), true, nil
		}
		cur, now, gone, err = s.claimRead(ctx, req) // now: the server's, at the read
		if errors.Is(err, errNoRow) {
			return storekit.ClaimResult{}, false, nil // deleted since the insert
		}
	}
	if err != nil {
		if retryable(err) {
			return storekit.ClaimResult{}, false, nil
		}
		return storekit.ClaimResult{}, false, err
	}
	return s.casMySQL(ctx, req, cur, now, gone)
}

// claimProcedure calls the claim procedure (stClaimProc): one round trip
// that inserts a fresh claim (wrote, and now is the time written) or
// returns the row found and the server's now at its read; errNoRow when
// the row was deleted between the two. An error is returned as the driver
// gave it when it is a deadlock (retryable) or says the procedure cannot
// be called (procUnusable); wrapped otherwise.
func (s *Store) claimProcedure(ctx context.Context, req storekit.ClaimRequest) (rec *storekit.Record, now int64, gone, wrote bool, err error) {
	st, err := s.stmt(ctx, stClaimProc)
	if err != nil {
		if procUnusable(err) {
			return nil, 0, false, false, err
		}
		return nil, 0, false, false, storeErr("claim", err)
	}
	var src string
	var raw rawRecord
	err = st.QueryRowContext(ctx, req.Tenant, req.Scope, req.Key, req.Nonce, req.PayloadHash,
		req.LeaseTTL.Milliseconds(), req.TakeoverAfter.Milliseconds(), req.Owner).
		Scan(append(append([]any{&src, &now}, raw.dest()...), &gone)...)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, 0, false, false, errNoRow
	case procUnusable(err) || retryable(err):
		return nil, 0, false, false, err
	case err != nil:
		return nil, 0, false, false, storeErr("claim", err)
	case src == "w":
		return nil, now, false, true, nil
	}
	rec, err = raw.record(req.Key)
	return rec, now, gone, false, err
}

// claimRead reads the row a MySQL claim did not insert (stClaimRead): the
// row, the server's clock at the read and whether its owner is gone; or
// errNoRow.
func (s *Store) claimRead(ctx context.Context, req storekit.ClaimRequest) (*storekit.Record, int64, bool, error) {
	st, err := s.stmt(ctx, stClaimRead)
	if err != nil {
		return nil, 0, false, storeErr("claim", err)
	}
	var raw rawRecord
	var now int64
	var gone bool
	err = retryTransient(ctx, func() error {
		return st.QueryRowContext(ctx, req.Nonce, req.Owner, req.Key).Scan(append(raw.dest(), &now, &gone)...)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, false, errNoRow
	}
	if err != nil {
		return nil, 0, false, storeErr("claim", err)
	}
	rec, err := raw.record(req.Key)
	return rec, now, gone, err
}

// hasReturning reports whether the MySQL server has INSERT ... RETURNING
// (MariaDB 10.5 and later), asking once per store (SELECT VERSION()); while
// it cannot tell, it reports false.
func (s *Store) hasReturning(ctx context.Context) bool {
	switch s.returning.Load() {
	case 1:
		return true
	case 2:
		return false
	}
	var v string
	if err := s.db.QueryRowContext(ctx, "SELECT VERSION()").Scan(&v); err != nil {
		return false
	}
	ok := mariaDBReturning(v)
	if ok {
		s.returning.Store(1)
	} else {
		s.returning.Store(2)
	}
	return ok
}

// mariaDBReturning reports whether a VERSION() string is MariaDB 10.5 or
// later.
func mariaDBReturning(v string) bool {
	if !strings.Contains(v, "MariaDB") {
		return false
	}
	var major, minor int
	if _, err := fmt.Sscanf(v, "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 10 || major == 10 && minor >= 5
}

// claimReturning sends the MariaDB claim (stClaimRet): it inserts a fresh
// claim, or finds the row, and returns the row it wrote or found and the
// server's now after the row's lock.
func (s *Store) claimReturning(ctx context.Context, req storekit.ClaimRequest) (*storekit.Record, int64, bool, error) {
	st, err := s.stmt(ctx, stClaimRet)
	if err != nil {
		return nil, 0, false, storeErr("claim", err)
	}
	var raw rawRecord
	var now int64
	var gone bool
	err = st.QueryRowContext(ctx, req.Tenant, req.Scope, req.Key, req.Nonce, req.PayloadHash,
		req.LeaseTTL.Milliseconds(), req.TakeoverAfter.Milliseconds(), req.Owner, req.Nonce, req.Owner).
		Scan(append(raw.dest(), &now, &gone)...)
	if err != nil {
		if retryable(err) {
			return nil, 0, false, err
		}
		return nil, 0, false, storeErr("claim", err)
	}
	rec, err := raw.record(req.Key)
	return rec, now, gone, err
}

// casMySQL decides the claim on the row cur found at now (gone: its
// owner was gone at the read), and when the row is claimable writes the
// decision with an UPDATE conditioned on the row being exactly as read.
// done is false when the row changed meanwhile.
func (s *Store) casMySQL(ctx context.Context, req storekit.ClaimRequest, cur *storekit.Record, now int64, gone bool) (storekit.ClaimResult, bool, error) {
	d := storekit.DecideClaimGone(cur, req, now, func(string) bool { return gone })
	res := d.Result()
	if !d.Write { // untouched, or ours already
		return res, true, nil
	}
	// The decision was taken at the read's now; the written times are the
	// server's now when the UPDATE runs (handed back by LAST_INSERT_ID), so
	// that the claim's heartbeat is no older than its write.
	next := res.Record
	tookOver := res.Outcome == storekit.TookOver
	var floor int64 // the expiry a takeover never shortens
	if tookOver {
		floor = cur.ExpiresAt
	}
	msg, typ := failureColumns(next.Error)
	lease := req.LeaseTTL.Milliseconds()
	args := []any{next.Nonce, next.Attempt, next.PayloadHash, next.Result, msg, typ,
		next.CompletedAt, floor, lease, tookOver, next.TakeoverMs, req.Tenant, req.Scope, next.Owner}
	args = append(args, s.keyArgs(req.Key)...)
	args = append(args, cur.Nonce, cur.Attempt, string(cur.Status), cur.HeartbeatAt, cur.ExpiresAt, tookOver)
	upd, err := s.execResult(ctx, stCAS, args...)
	var n int64
	if err == nil {
		n, err = upd.RowsAffected()
	}
	var wrote int64
	if err == nil && n == 1 {
		wrote, err = upd.LastInsertId()
	}
	if err != nil {
		if retryable(err) {
			return storekit.ClaimResult{}, false, nil
		}
		return storekit.ClaimResult{}, false, storeErr("claim", err)
	}
	if n != 1 {
		return storekit.ClaimResult{}, false, nil // changed since the read, or no longer as live as it was judged
	}
	next.StartedAt, next.HeartbeatAt = wrote, wrote
	next.ExpiresAt = max(floor, wrote+lease)
	return res, true, nil
}

// retryable reports a MySQL deadlock, after which InnoDB has rolled the
// statement back and it can be sent again.
func retryable(err error) bool {
	n, _, ok := mysqlServerError(err)
	return ok && n == 1213
}

var errNoRow = errors.New("sqlstore: no row")

// read returns the decoded row for key, whether or not it is live, and
// the server's clock (Unix ms) when it was read; or errNoRow.
func (s *Store) read(ctx context.Context, op, key string) (*storekit.Record, int64, error) {
	st, err := s.stmt(ctx, stGet)
	if err != nil {
		return nil, 0, storeErr(op, err)
	}
	var raw rawRecord
	var now int64
	err = retryTransient(ctx, func() error {
		return st.QueryRowContext(ctx, s.keyArgs(key)...).Scan(append(raw.dest(), &now)...)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return nil, 0, errNoRow
	}
	if err != nil {
		return nil, 0, storeErr(op, err)
	}
	rec, err := raw.record(key)
	return rec, now, err
}

// Heartbeat implements storekit.Store: one UPDATE conditioned on the nonce and
// status.
func (s *Store) Heartbeat(ctx context.Context, key, nonce string, leaseTTL time.Duration) error {
	if err := s.checkOwner("heartbeat", key, nonce); err != nil {
		return err
	}
	var args []any
	if s.dialect != MySQL {
		args = append(s.keyArgs(key), nonce, leaseTTL.Milliseconds())
	} else {
		args = append(append([]any{leaseTTL.Milliseconds()}, s.keyArgs(key)...), nonce)
	}
	return s.owned(ctx, "heartbeat", stHeartbeat, key, nonce, args)
}

// Complete implements storekit.Store: one UPDATE conditioned on the nonce.
func (s *Store) Complete(ctx context.Context, key, nonce string, c storekit.Completion) error {
	if err := s.checkOwner("complete", key, nonce); err != nil {
		return err
	}
	if err := checked("complete", key, storekit.ValidateCompletion(c)); err != nil {
		return err
	}
	msg, typ := failureColumns(c.Error)
	result := c.Result
	if result != nil && len(result) == 0 {
		result = nil
	}
	if err := s.checkPacket(ctx, len(result)+len(key)+len(nonce)+statementSlack(c)); err != nil {
		return err
	}
	var args []any
	if s.dialect != MySQL {
		args = append(s.keyArgs(key), nonce, string(c.Status), result, msg, typ, c.TTL.Milliseconds())
	} else {
		args = append(append([]any{string(c.Status), result, msg, typ, c.TTL.Milliseconds()},
			s.keyArgs(key)...), nonce)
	}
	return s.owned(ctx, "complete", stComplete, key, nonce, args)
}

// statementSlack is a bound on what a completion statement adds to its
// result: the message, the type and the statement text.
func statementSlack(c storekit.Completion) int {
	n := 4096
	if c.Error != nil {
		n += len(c.Error.Message) + len(c.Error.Type)
	}
	return n
}

// checkPacket refuses, as a permanent StoreError, a MySQL statement of
// about size bytes that is over the server's max_allowed_packet. The server
// answers such a statement by closing the connection, which looks like any
// connection reset and would be retried for the whole takeover window;
// refused here, the Guard records the outcome without its result at once.
// The limit is read once per store (SELECT @@max_allowed_packet); while it
// cannot be read, nothing is refused here.
func (s *Store) checkPacket(ctx context.Context, size int) error {
	if s.dialect != MySQL {
		return nil
	}
	limit := s.maxPacket.Load()
	if limit == 0 {
		if err := s.db.QueryRowContext(ctx, "SELECT @@max_allowed_packet").Scan(&limit); err != nil || limit <= 0 {
			return nil
		}
		s.maxPacket.Store(limit)
	}
	if int64(size) <= limit {
		return nil
	}
	return &storekit.StoreError{Op: "complete", Permanent: true,
		Err: fmt.Errorf("sqlstore: statement of about %d bytes is over the server's max_allowed_packet (%d)", size, limit)}
}

// Release implements storekit.Store: one UPDATE setting expires_at = now,
// conditioned on the nonce and status. The row stays, so the next claim
// continues its attempt numbers.
func (s *Store) Release(ctx context.Context, key, nonce string) error {
	if err := s.checkOwner("release", key, nonce); err != nil {
		return err
	}
	return s.owned(ctx, "release", stRelease, key, nonce, append(s.keyArgs(key), nonce))
}

// owned runs an UPDATE conditioned on the nonce and maps no matched row to
// storekit.ErrLostOwnership. PostgreSQL counts a matched row as affected.
// MySQL reports zero affected rows also when the update wrote the values
// the row already had (a retried complete, two heartbeats in one
// millisecond), so there the statement marks a match itself: it assigns
// LAST_INSERT_ID(now) to a column, which only a matched row evaluates, and
// the OK packet carries that now (0: no row matched). No second statement:
// a read after the UPDATE could see a row changed since (a claim of the
// same nonce) and report a write that never happened.
func (s *Store) owned(ctx context.Context, op string, id stmtID, key, nonce string, args []any) error {
	res, err := s.execResult(ctx, id, args...)
	var n int64
	if err == nil {
		if s.dialect == MySQL {
			n, err = res.LastInsertId()
		} else {
			n, err = res.RowsAffected()
		}
	}
	if err != nil {
		return storeErr(op, err)
	}
	if n > 0 {
		return nil
	}
	return fmt.Errorf("sqlstore: %s %s: %w", op, key, storekit.ErrLostOwnership)
}

// Get implements storekit.Store: one SELECT. A row that has expired is
// storekit.ErrNotFound.
func (s *Store) Get(ctx context.Context, key string) (*storekit.Record, error) {
	if err := s.checkKey("get", key); err != nil {
		return nil, err
	}
	rec, now, err := s.read(ctx, "get", key)
	if err != nil && !errors.Is(err, errNoRow) {
		return nil, err
	}
	return storekit.Found(rec, now)
}

// Delete implements storekit.Store: one DELETE, whatever the row holds.
func (s *Store) Delete(ctx context.Context, key string) error {
	if err := s.checkKey("delete", key); err != nil {
		return err
	}
	if _, err := s.exec(ctx, stDelete, s.keyArgs(key)...); err != nil {
		return storeErr("delete", err)
	}
	return nil
}

// Purge deletes the rows of the table that expired more than the retention
// ago (WithRetention), whatever their tenant and scope, and returns how
// many it deleted. It deletes in batches (100 rows on PostgreSQL,
// storekit.DefaultPurgeBatch elsewhere) with a rest as long as the batch
// after each, each one statement (PostgreSQL) or one short READ COMMITTED
// transaction (MySQL) that judges every row again by the database's clock
// as it deletes it, so a row a claim revives meanwhile stays, and no
// claim waits on Purge for longer than one batch's lock of the rows it
// removes (see Lifecycle in docs/sqlstore.md). An open store
// runs it by itself (WithCleanup); call it from a job of your own with
// WithoutCleanup. Rows expired but not yet deleted are ignored by every
// operation. When ctx ends, Purge returns what it deleted so far and the
// error.
func (s *Store) Purge(ctx context.Context) (int, error) {
	if err := s.Validate(); err != nil {
		return 0, err
	}
	return s.purger.purge(ctx)
}
