package sqlstore

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/idem-go/idem/storekit"
)

// A process's presence in a database (PostgreSQL, MySQL/MariaDB) is a
// session lock its presence connection holds, named by a random token:
// the database releases it when the session ends, however the process
// died, so a claim recorded with that token is known dead at once (on
// MySQL the claim statements check the lock, owner_gone.sql; on
// PostgreSQL a claim that met another process's live claim asks,
// OwnerLiveness). Every Store of a
// process over one *sql.DB shares that connection and its token. SQLite
// has no sessions: its claims carry no token (Owner is "").
const (
	// pgOwnerClass is the first key of the two-key advisory locks of
	// presence, pg_advisory_lock(pgOwnerClass, hashtext(token)): a lock
	// space of its own, apart from the one-key locks the claim takes and
	// from other two-key locks of the application's (pg_locks shows it
	// as classid, the token's hash as objid, and objsubid 2).
	pgOwnerClass = 0x1de05eed
	// mysqlOwnerLock prefixes the token in the name of a MySQL presence
	// lock (GET_LOCK).
	mysqlOwnerLock = "idem_owner:"
)

// presenceCheck is how often the presence connection is checked; a lost
// one is opened again, and the lock taken again with the same token.
var presenceCheck atomic.Int64 // nanoseconds; a second unless a test changes it

func init() { presenceCheck.Store(int64(time.Second)) }

// presenceTimeout bounds each statement of the presence connection.
const presenceTimeout = 10 * time.Second

// presence is this process's presence in the database of one *sql.DB.
type presence struct {
	db      *sql.DB
	dialect Dialect
	token   string
	log     *slog.Logger

	mu   sync.Mutex
	conn *sql.Conn // the session that holds the lock
	id   int64     // its id: PostgreSQL's backend pid, MySQL's connection id
	off  bool      // the lock is not held by that session (a pooler): no presence
}

var (
	presenceMu sync.Mutex
	presences  = map[*sql.DB]*presence{}
)

// presence returns the store's presence, made on first use; nil when the
// dialect has none or it could not be taken (then claims carry no token,
// and the takeover threshold decides).
func (s *Store) presence() *presence {
	if s.dialect == SQLite {
		return nil
	}
	s.presOnce.Do(func() {
		if _, pkg, ok := driverDialect(s.db); ok || pkg != "" { // not a zero sql.DB, which has no driver
			s.pres = presenceFor(s.db, s.dialect, s.logger())
		}
	})
	return s.pres
}

// logger is the store's logger (WithLogger), or slog.Default().
func (s *Store) logger() *slog.Logger {
	if s.cfg.logger != nil {
		return s.cfg.logger
	}
	return slog.Default()
}

// presenceFor returns this process's presence over db, taking its lock on
// first use; nil, after one log line, when it cannot.
func presenceFor(db *sql.DB, d Dialect, log *slog.Logger) *presence {
	presenceMu.Lock()
	defer presenceMu.Unlock()
	if p := presences[db]; p != nil {
		return p
	}
	if n := db.Stats().MaxOpenConnections; n > 0 && n < 3 {
		log.Warn("sqlstore: no presence lock: the pool allows fewer than 3 connections (SetMaxOpenConns), and the lock would hold one; "+
			"claims of this process are taken over after the takeover threshold only", "max_open_conns", n)
		return nil
	}
	p := &presence{db: db, dialect: d, log: log}
	var err error
	for range 3 { // a token whose lock is taken (a hash collision) is drawn again
		p.token = newToken()
		if err = p.acquire(); !errors.Is(err, errLockTaken) {
			break
		}
	}
	if err != nil {
		log.Warn("sqlstore: no presence lock; claims of this process are taken over after the takeover threshold only", "err", err)
		return nil
	}
	if p.off {
		_ = p.conn.Close() // the lock is not its own: free the connection
		log.Warn("sqlstore: the presence lock is not held by the session that took it (a connection pooler that " +
			"does not keep sessions, such as PgBouncer in transaction mode?): no presence, claims of this process " +
			"are taken over after the takeover threshold only")
	}
	presences[db] = p
	if !p.off {
		go p.watch()
	}
	return p
}

// newToken returns 32 random hex digits.
func newToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// owner returns the token, "" when there is no presence.
func (p *presence) owner() string {
	if p == nil {
		return ""
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.off {
		return ""
	}
	return p.token
}

var errLockTaken = errors.New("sqlstore: presence lock held by another session")

// lockQuery takes the presence lock without waiting and returns whether
// it did and the session's id (PostgreSQL's backend pid, MySQL's
// connection id); selfQuery returns the session's id; holderQuery, sent
// on another connection, the id of the session holding the lock (NULL:
// none) and that connection's own.
func (p *presence) queries() (lock, self, holder string, args []any) {
	if p.dialect == Postgres {
		return `SELECT pg_try_advisory_lock($1, hashtext($2)), pg_backend_pid()`,
			`SELECT pg_backend_pid()`,
			`SELECT (SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND classid = $1 AND objid = hashtext($2)::oid ` +
				`AND objsubid = 2 AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database())), pg_backend_pid()`,
			[]any{pgOwnerClass, p.token}
	}
	return `SELECT COALESCE(GET_LOCK(?, 0), 0) = 1, CONNECTION_ID()`, `SELECT CONNECTION_ID()`,
		`SELECT IS_USED_LOCK(?), CONNECTION_ID()`, []any{mysqlOwnerLock + p.token}
}

// acquire opens the presence connection and takes the lock on it, then
// checks from another connection that the lock's holder is that session
// (p.off when it is not).
func (p *presence) acquire() error {
	ctx, cancel := context.WithTimeout(context.Background(), presenceTimeout)
	defer cancel()
	conn, err := p.db.Conn(ctx)
	if err != nil {
		return err
	}
	lock, self, holder, args := p.queries()
	var ok bool
	var id int64
	if err := conn.QueryRowContext(ctx, lock, args...).Scan(&ok, &id); err != nil {
		_ = conn.Close()
		return err
	}
	if !ok {
		_ = conn.Close()
		return errLockTaken
	}
	// Behind a pooler that does not keep sessions, the statements of one
	// connection reach different server sessions, and another
	// connection's may reach the one that holds the lock.
	var held sql.NullInt64
	var other, again int64
	err = p.db.QueryRowContext(ctx, holder, args...).Scan(&held, &other)
	if err == nil {
		err = conn.QueryRowContext(ctx, self).Scan(&again)
	}
	if err != nil {
		_ = conn.Close()
		return err
	}
	p.mu.Lock()
	p.conn, p.id = conn, id
	p.off = !held.Valid || held.Int64 != id || again != id || other == id
	p.mu.Unlock()
	return nil
}

// watch checks the presence connection every presenceCheck; when it is
// lost it opens another and takes the lock again (same token), logging
// both. It ends when db is closed.
func (p *presence) watch() {
	t := time.NewTicker(time.Duration(presenceCheck.Load()))
	defer t.Stop()
	for range t.C {
		if dbClosed(p.db) {
			p.close()
			return
		}
		p.mu.Lock()
		conn := p.conn
		p.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), presenceTimeout)
		err := conn.PingContext(ctx)
		cancel()
		if err == nil {
			continue
		}
		p.log.Warn("sqlstore: presence connection lost; taking the presence lock again", "err", err)
		_ = conn.Close()
		if !p.retake(t) {
			return
		}
		if p.owner() == "" {
			p.log.Warn("sqlstore: the presence lock taken again is not held by the session that took it (a pooler?): no presence")
			p.mu.Lock()
			_ = p.conn.Close()
			p.mu.Unlock()
			return
		}
		p.log.Info("sqlstore: presence lock taken again")
	}
}

// retake takes the lock again, at every tick of t until it succeeds
// (true) or db is closed (false).
func (p *presence) retake(t *time.Ticker) bool {
	for {
		err := p.acquire()
		if err == nil {
			return true
		}
		if dbClosed(p.db) {
			p.close()
			return false
		}
		<-t.C
	}
}

// close closes the presence connection (releasing the lock) and forgets p.
func (p *presence) close() {
	presenceMu.Lock()
	if presences[p.db] == p {
		delete(presences, p.db)
	}
	presenceMu.Unlock()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		_ = p.conn.Close()
	}
}

// dbClosed reports whether db has been closed, without I/O: Conn checks
// that before the context, which is done already.
func dbClosed(db *sql.DB) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	c, err := db.Conn(ctx)
	if err == nil {
		_ = c.Close()
		return false
	}
	return !errors.Is(err, context.Canceled)
}

// Owner implements storekit.Presence: this process's token in the
// store's database (the first call takes the presence lock), "" on SQLite,
// behind a pooler that does not keep sessions, or when the lock could not
// be taken.
func (s *Store) Owner() string { return s.presence().owner() }

// OwnerLiveness implements storekit.LivenessChecker: owner (a
// Record.Owner) is alive while a session holds its token's presence lock,
// gone otherwise; unknown on SQLite and for an owner without a token.
func (s *Store) OwnerLiveness(ctx context.Context, owner string) (storekit.Liveness, error) {
	tok := storekit.OwnerToken(owner)
	if s.dialect == SQLite || tok == "" {
		return storekit.LivenessUnknown, nil
	}
	q := `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND classid = $1 AND objid = hashtext($2)::oid ` +
		`AND objsubid = 2 AND granted AND database = (SELECT oid FROM pg_database WHERE datname = current_database()))`
	args := []any{pgOwnerClass, tok}
	if s.dialect == MySQL {
		q, args = `SELECT IS_USED_LOCK(?) IS NOT NULL`, []any{mysqlOwnerLock + tok}
	}
	var alive bool
	if err := s.db.QueryRowContext(ctx, q, args...).Scan(&alive); err != nil {
		return storekit.LivenessUnknown, storeErr("owner liveness", fmt.Errorf("%s: %w", owner, err))
	}
	if alive {
		return storekit.Alive, nil
	}
	return storekit.Gone, nil
}

var (
	_ storekit.Presence        = (*Store)(nil)
	_ storekit.LivenessChecker = (*Store)(nil)
)
