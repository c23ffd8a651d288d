package sqlstore

import (
	"context"
	"database/sql"
	"time"
)

// Resent returns how often s sent a claim again because a concurrent write
// made its answer out of date.
func Resent(s *Store) int64 { return s.resent.Load() }

// Transient exposes the transient-error classification to tests.
var Transient = transient

// WithProcessClock is accepted and ignored: the store reads no process
// clock (the database's clock decides freshness, staleness and expiry).
// TestSkewedProcessClocks hands it skewed clocks so that the same test,
// run against the earlier caller-clock store (where it was WithClock),
// shows the takeover this version prevents.
func WithProcessClock(func() time.Time) Option { return func(*config) {} }

// ListenerPID returns the backend process of s's listening connection, 0
// while there is none.
func ListenerPID(s *Store) uint32 {
	s.lmu.Lock()
	l := s.lis
	s.lmu.Unlock()
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pid
}

// SetListenHealth shortens the listening connection's health interval for
// listeners started afterwards; restore puts it back.
func SetListenHealth(d time.Duration) (restore func()) {
	old := listenHealth
	listenHealth = d
	return func() { listenHealth = old }
}

// SetReturning makes a MySQL store use INSERT ... RETURNING for its claims
// (on) or the INSERT IGNORE + SELECT of servers without it (off).
func SetReturning(s *Store, on bool) {
	if on {
		s.returning.Store(1)
	} else {
		s.returning.Store(2)
	}
}

// SetProcedure makes a MySQL store without INSERT ... RETURNING claim
// through its claim procedure (on) or in two statements (off), as when
// the procedure is missing.
func SetProcedure(s *Store, on bool) { s.noProc.Store(!on) }

// ClaimProcedure is the quoted name of a MySQL table's claim procedure.
var ClaimProcedure = claimProcedure

// PresenceSession returns the session id of the presence connection of
// s's database (PostgreSQL's backend pid, MySQL's connection id), 0 when
// it has none.
func PresenceSession(s *Store) int64 {
	p := s.presence()
	if p == nil {
		return 0
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.id
}

// SetPresenceCheck changes how often presence connections made afterwards
// are checked; restore puts it back.
func SetPresenceCheck(d time.Duration) (restore func()) {
	old := presenceCheck.Swap(int64(d))
	return func() { presenceCheck.Store(old) }
}

// OneCommit reports whether DoTx on s claims inside its transaction.
func OneCommit(s *Store) bool { return s.oneCommit() }

// SetBeforeCommit makes f run between a one-commit DoTx's completion and
// its COMMIT (process tests: a child killed there).
func SetBeforeCommit(f func()) { beforeCommit = f }

// PrepareClaim prepares s's claim statement (as its first claim does).
func PrepareClaim(ctx context.Context, s *Store) error {
	_, err := s.stmt(ctx, stClaim)
	return err
}

// KeepClaim hands s's statement cache loser, a claim statement prepared
// after the one in the cache (as a call that lost a race to prepare it
// does), and returns the statement the call gets and whether s's lock
// was free right after.
func KeepClaim(s *Store, loser *sql.Stmt) (*sql.Stmt, bool) {
	got := s.keepStmt(stClaim, loser)
	free := s.mu.TryLock()
	if free {
		s.mu.Unlock()
	}
	return got, free
}
