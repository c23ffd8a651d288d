package sqlstore

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// cols are the record columns every read returns, in scan order.
const cols = "record_version, claim_nonce, status, attempt_count, payload_hash, result, " +
	"error_message, error_type, started_at, heartbeat_at, completed_at, expires_at, taken_over_at, takeover_ms"

// statement names.
type stmtID int

const (
	stClaim stmtID = iota // Postgres: upsert + existing row; MySQL: INSERT IGNORE
	stCAS                 // MySQL: conditional takeover / re-claim
	stGet
	stHeartbeat
	stComplete
	stRelease
	stDelete
	stWatch      // Postgres: mark a row watched, so that its changes notify
	stCompleteTx // DoTx's completion inside its transaction (MySQL: hands back the connection id)
	stClaimRet   // MariaDB 10.5+: the claim's insert returning the row it wrote or found
	stClaimProc  // MySQL: CALL of the claim procedure Migrate creates (insert, or the row found)
	numStmts
)

// queries holds the text of every statement for one table and dialect.
type queries struct {
	create []string
	// proc creates the MySQL claim procedure (empty on PostgreSQL); Migrate
	// runs it after create.
	proc string
	text [numStmts]string
	// readBack is DoTx's locking read of a record row after a failed
	// commit (not prepared: it is rare).
	readBack string
	// SQLite (sqlite.go): the transactions' first statement, the clock's
	// read, and a purge batch.
	liteLock, liteNow, litePurge string
}

// quote returns the quoted, possibly schema-qualified table name and the
// unquoted index name for its expires_at index.
func quote(d Dialect, table string) (qtable, index string) {
	q := `"`
	if d == MySQL {
		q = "`"
	}
	parts := strings.Split(table, ".")
	quoted := make([]string, len(parts))
	for i, p := range parts {
		quoted[i] = q + p + q
	}
	index = parts[len(parts)-1] + "_expires_idx"
	return strings.Join(quoted, "."), q + index + q
}

// claimProcedure returns the quoted name of a MySQL table's claim
// procedure: the table's name (and schema) with "_claim_v2", the version
// of its body, so that a later body gets a name of its own (Migrate
// creates it beside an earlier version, which processes not yet upgraded
// may still call). v2 reads the clock of its read after the row (v1 read
// it when the statement started, and could judge a row released since
// live).
func claimProcedure(table string) string {
	p, _ := quote(MySQL, table+"_claim_v2")
	return p
}

// Server clock expressions: the database's time in Unix milliseconds.
//
// PostgreSQL's clock_timestamp() is the time it is evaluated. The claim's
// first read and Get read it once per statement (a materialized CTE, an
// InitPlan); the writes that can wait for a row lock (the claim's conflict
// update, Heartbeat, Complete, Release) evaluate it in the row's WHERE and
// SET, which PostgreSQL evaluates after the lock is held (ON CONFLICT DO
// UPDATE locks the row before its WHERE; an UPDATE that finds its row
// changed by the transaction it waited for evaluates the row again,
// EvalPlanQual), so a write that waited behind another judges the row it
// waited for with the time after the wait.
//
// MySQL's UTC_TIMESTAMP(6) is NOW(6) in UTC: the time the statement
// started, constant within the statement and free of the session time
// zone (the UNIX_TIMESTAMP(NOW(6)) spelling is ambiguous in the hour a
// daylight saving change repeats). mysqlNow is used only by Purge's read.
// mysqlExecNow adds the time elapsed since the statement
// started (SYSDATE(6), the time it is evaluated, minus NOW(6), both in the
// session zone), so a write evaluates it after InnoDB handed it the locked
// row; a statement that writes it in several columns writes it once and
// refers to that column (MySQL evaluates an UPDATE's assignments, and an
// INSERT's values, from left to right, with the values already assigned).
// SYSDATE is not frozen by SET timestamp, and a server started with
// --sysdate-is-now makes it NOW again (then a write that waited judges the
// row with the time it started, as before). A read that judges a row (Get,
// the claim's read) takes mysqlExecNow too, in its select list, which is
// evaluated after the row is read: NOW is fixed when the statement starts,
// before InnoDB takes the read's snapshot, so a Release that commits in
// between is seen by the read with an expires_at later than NOW, and the
// released row would look live (a claim then took it over, or answered
// Existing; TestClaimReadClock).
const (
	pgNow = `floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint`
	// pgKeyLock takes the transaction-level advisory lock of the key $3,
	// which a claim that inserts and a Delete hold until they commit.
	pgKeyLock    = `pg_advisory_xact_lock(hashtextextended($3, 0))`
	mysqlNow     = `(TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) DIV 1000)`
	mysqlExecNow = `((TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6)) + ` +
		`TIMESTAMPDIFF(MICROSECOND, NOW(6), SYSDATE(6))) DIV 1000)`
)

// maxChannelLen is PostgreSQL's limit on a channel name (NAMEDATALEN - 1).
const maxChannelLen = 63

// notifyChannel returns the PostgreSQL channel a table's changes are
// notified on: the table name as given (with its schema, if any) when it
// fits, otherwise its first 46 bytes and 16 hex digits of its SHA-256.
func notifyChannel(table string) string {
	if len(table) <= maxChannelLen {
		return table
	}
	sum := sha256.Sum256([]byte(table))
	return table[:46] + "_" + hex.EncodeToString(sum[:8])
}

func buildQueries(d Dialect, table string) queries {
	t, idx := quote(d, table)
	var q queries
	switch d {
	case Postgres:
		where := "key_hash = $1"
		// The channel is letters, digits, underscores and dots (WithTable),
		// so it is a plain string literal. pg_notify runs only for a row a
		// waiter marked watched (CASE evaluates the branch it takes, and
		// pg_notify is volatile, so it is never folded); the SELECT returns
		// one row per changed row either way, so affected rows count the
		// change.
		notify := `SELECT CASE WHEN watched THEN pg_notify('` + notifyChannel(table) + `', key_hash) END FROM u`
		clk := `WITH clk AS MATERIALIZED (SELECT ` + pgNow + ` AS ms)`
		q.create = []string{
			`CREATE TABLE IF NOT EXISTS ` + t + ` (
  tenant         TEXT     NOT NULL DEFAULT '',
  scope          TEXT     NOT NULL DEFAULT '',
  key_hash       TEXT     NOT NULL,
  record_version SMALLINT NOT NULL DEFAULT 1,
  claim_nonce    TEXT     NOT NULL,
  status         TEXT     NOT NULL,
  attempt_count  BIGINT   NOT NULL DEFAULT 1,
  payload_hash   TEXT     NOT NULL DEFAULT '',
  result         BYTEA,
  error_message  TEXT,
  error_type     TEXT,
  started_at     BIGINT   NOT NULL,
  heartbeat_at   BIGINT   NOT NULL,
  completed_at   BIGINT   NOT NULL DEFAULT 0,
  expires_at     BIGINT   NOT NULL,
  taken_over_at  BIGINT   NOT NULL DEFAULT 0,
  takeover_ms    BIGINT   NOT NULL DEFAULT 0,
  watched        BOOLEAN  NOT NULL DEFAULT false,
  PRIMARY KEY (key_hash)
)`,
			`CREATE INDEX IF NOT EXISTS ` + idx + ` ON ` + t + ` (expires_at)`,
			// Tables made before push wake-ups.
			`ALTER TABLE ` + t + ` ADD COLUMN IF NOT EXISTS watched BOOLEAN NOT NULL DEFAULT false`,
		}
		// $1 tenant, $2 scope, $3 key, $4 nonce, $5 payload hash, $6 lease
		// in ms, $7 the caller's takeover threshold in ms (stored with the
		// claim; a row is stale by its own stored threshold, or by $7 when
		// it has none). clk.ms is the server's now, read once.
		//
		// cur is the row in the statement's snapshot. When it is live and
		// not claimable (the replay of a completed key, a live claim) the
		// INSERT selects no row, so the statement only reads: no row lock,
		// no transaction id, no WAL flush at commit. Otherwise the upsert
		// runs, and the conflict update's WHERE applies storekit.DecideClaim
		// to the newest committed version of the row: it has expired, or
		// it is an in-progress claim with the same payload hash, another
		// nonce and a stale heartbeat (and in both cases it is decodable).
		// The conflict update judges expiry, and writes the row, with the
		// server's clock read after the row is locked (not clk.ms, read
		// before a wait for a concurrent writer: a claim that waited behind
		// a Release must see the released row as released, and re-claim
		// it, not take it over); its SET reads the clock once, in a
		// sub-SELECT evaluated for the locked row. A new row's times are
		// lk.ms: the clock read after the key's advisory lock and a lock on
		// the key's row in the snapshot (lk is only evaluated when the
		// INSERT selects its row, so a replay locks nothing). The insert's
		// values are built before it meets a conflicting row, and when that
		// row is being deleted it waits, then inserts them: a Delete holds
		// the advisory lock (so does a claim that inserts, whose row a
		// later Delete may remove while this one waits), and Purge's rows
		// were in the snapshot, so the clock lk reads is never older than
		// the delete the insert waited for (TestClaimBehindDelete). With
		// clk.ms instead, the new claim's heartbeat would be older than
		// the claim by the wait. Staleness (a takeover)
		// is judged with clk.ms, the earlier time:
		// a heartbeat stale then is stale after the wait too, and one that
		// is not is refused here (the statement is sent again, with a
		// newer clock, when its snapshot says the row was claimable), so
		// claims queued behind a takeover's lock do not take over the
		// claim they waited for as soon as their wait outlasts the
		// threshold. When
		// nothing is written, the last branch returns cur (see
		// claimPostgres for why that snapshot is checked). Every row
		// returned carries clk.ms, so the store checks it by the same clock.
		claimable := `%[1]s.record_version = 1 AND %[1]s.attempt_count >= 1 AND %[1]s.claim_nonce <> ''
    AND %[1]s.status IN ('in_progress', 'completed', 'failed')
    AND (%[1]s.status <> 'failed' OR %[1]s.error_message IS NOT NULL)
    AND (%[1]s.error_type IS NULL OR %[1]s.error_message IS NOT NULL)
    AND (%[1]s.expires_at <= %[2]s
      OR (%[1]s.status = 'in_progress' AND %[1]s.payload_hash = $5
          AND %[1]s.claim_nonce <> $4
          AND %[3]s - %[1]s.heartbeat_at >= CASE WHEN %[1]s.takeover_ms > 0 THEN %[1]s.takeover_ms ELSE $7 END))`
		q.text[stClaim] = fmt.Sprintf(clk+`, cur AS (
  SELECT %[2]s FROM %[1]s WHERE key_hash = $3
), lk AS MATERIALIZED (
  SELECT CASE WHEN (SELECT count(*) FROM (SELECT `+pgKeyLock+`) a) = 1 THEN
    CASE WHEN (SELECT count(*) FROM (SELECT 1 FROM %[1]s WHERE key_hash = $3 FOR UPDATE) l) >= 0
      THEN `+pgNow+` END END AS ms
), w AS (
  INSERT INTO %[1]s AS r (tenant, scope, key_hash, record_version, claim_nonce, status, attempt_count,
    payload_hash, result, error_message, error_type, started_at, heartbeat_at, completed_at, expires_at, taken_over_at, takeover_ms)
  SELECT $1, $2, $3, 1, $4, 'in_progress', 1, $5, NULL, NULL, NULL, lk.ms, lk.ms, 0, lk.ms + $6, 0, $7 FROM lk
  WHERE NOT EXISTS (SELECT 1 FROM cur) OR EXISTS (SELECT 1 FROM cur, clk WHERE `+fmt.Sprintf(claimable, "cur", "clk.ms", "clk.ms")+`)
  ON CONFLICT (key_hash) DO UPDATE SET
    (tenant, scope, claim_nonce, status, attempt_count, payload_hash, result, error_message, error_type,
     started_at, heartbeat_at, completed_at, expires_at, taken_over_at, takeover_ms) =
    (SELECT EXCLUDED.tenant, EXCLUDED.scope, EXCLUDED.claim_nonce, 'in_progress', r.attempt_count + 1, EXCLUDED.payload_hash,
       CASE WHEN r.expires_at <= n.ck THEN NULL ELSE r.result END,
       CASE WHEN r.expires_at <= n.ck THEN NULL ELSE r.error_message END,
       CASE WHEN r.expires_at <= n.ck THEN NULL ELSE r.error_type END,
       n.ck, n.ck,
       CASE WHEN r.expires_at <= n.ck THEN 0 ELSE r.completed_at END,
       CASE WHEN r.expires_at <= n.ck THEN n.ck + $6 ELSE GREATEST(r.expires_at, n.ck + $6) END,
       CASE WHEN r.expires_at <= n.ck THEN 0 ELSE n.ck END,
       EXCLUDED.takeover_ms
     FROM (SELECT `+pgNow+` AS ck) n)
  WHERE `+fmt.Sprintf(claimable, "r", pgNow, "(SELECT ms FROM clk)")+`
  RETURNING r.record_version, r.claim_nonce, r.status, r.attempt_count, r.payload_hash, r.result,
    r.error_message, r.error_type, r.started_at, r.heartbeat_at, r.completed_at, r.expires_at, r.taken_over_at, r.takeover_ms
)
SELECT 'w'::text, clk.ms, w.* FROM w, clk
UNION ALL
SELECT 'e'::text, clk.ms, cur.* FROM cur, clk WHERE NOT EXISTS (SELECT 1 FROM w)`, t, cols)
		// The server's now rides along (an InitPlan, evaluated once).
		q.text[stGet] = `SELECT ` + cols + `, (SELECT ` + pgNow + `) FROM ` + t + ` WHERE ` + where
		// Heartbeat, Complete and Release read the clock in the row's WHERE
		// and SET (pgNow, not clk), so that a write that waited for the row
		// lock judges the row it waited for with the time after the wait
		// (EvalPlanQual evaluates both again for the newest version).
		// $1 key, $2 nonce, $3 lease in ms
		q.text[stHeartbeat] = `UPDATE ` + t + ` SET (heartbeat_at, expires_at) = ` +
			`(SELECT n.ck, GREATEST(expires_at, n.ck + $3) FROM (SELECT ` + pgNow + ` AS ck) n) ` +
			`WHERE ` + where + ` AND claim_nonce = $2 AND status = 'in_progress' AND expires_at > ` + pgNow
		// $1 key, $2 nonce, $3 status, $4 result, $5 error message, $6 error
		// type, $7 ttl in ms. The notification is sent when the statement
		// commits, only if it changed the row; affected rows are the rows
		// of the final SELECT.
		q.text[stComplete] = `WITH u AS (UPDATE ` + t + ` SET status = $3, result = $4, error_message = $5, error_type = $6, ` +
			`(completed_at, heartbeat_at, expires_at) = (SELECT n.ck, n.ck, n.ck + $7 FROM (SELECT ` + pgNow + ` AS ck) n) ` +
			`WHERE ` + where + ` AND claim_nonce = $2 RETURNING key_hash, watched) ` + notify
		// $1 key, $2 nonce. LEAST: a release never moves the expiry of a
		// record already released (or expired) forward, where a Get
		// that read its now before would see it live again.
		q.text[stRelease] = `WITH u AS (UPDATE ` + t + ` SET expires_at = LEAST(expires_at, ` + pgNow + `) WHERE ` + where +
			` AND claim_nonce = $2 AND status = 'in_progress' RETURNING key_hash, watched) ` + notify
		q.readBack = `SELECT claim_nonce, status FROM ` + t + ` WHERE ` + where + ` FOR UPDATE`
		q.text[stCompleteTx] = q.text[stComplete]
		// The key's lock first (see stClaim's lk): a claim inserting the
		// key after this delete reads its clock after the delete commits.
		q.text[stDelete] = `WITH l AS MATERIALIZED (SELECT ` + strings.ReplaceAll(pgKeyLock, "$3", "$1") + `), ` +
			`u AS (DELETE FROM ` + t + ` WHERE ` + where + ` AND EXISTS (SELECT 1 FROM l) RETURNING key_hash, watched) ` + notify
		// $1 key. Sent by Watch; the flag stays for the row's life (a
		// takeover keeps it, so the new owner's completion wakes waiters
		// still watching), and only rows once waited on pay for a
		// notification.
		q.text[stWatch] = `UPDATE ` + t + ` SET watched = true WHERE ` + where + ` AND NOT watched`
	case MySQL:
		where := "key_hash = ?"
		q.create = []string{
			`CREATE TABLE IF NOT EXISTS ` + t + ` (
  tenant         VARCHAR(64)  NOT NULL DEFAULT '',
  scope          VARCHAR(255) NOT NULL DEFAULT '',
  key_hash       VARCHAR(255) NOT NULL,
  record_version SMALLINT     NOT NULL DEFAULT 1,
  claim_nonce    VARCHAR(64)  NOT NULL,
  status         VARCHAR(16)  NOT NULL,
  attempt_count  BIGINT       NOT NULL DEFAULT 1,
  payload_hash   VARCHAR(255) NOT NULL DEFAULT '',
  result         LONGBLOB     NULL,
  error_message  MEDIUMTEXT   NULL,
  error_type     TEXT         NULL,
  started_at     BIGINT       NOT NULL,
  heartbeat_at   BIGINT       NOT NULL,
  completed_at   BIGINT       NOT NULL DEFAULT 0,
  expires_at     BIGINT       NOT NULL,
  taken_over_at  BIGINT       NOT NULL DEFAULT 0,
  takeover_ms    BIGINT       NOT NULL DEFAULT 0,
  PRIMARY KEY (key_hash),
  KEY ` + idx + ` (expires_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		}
		// tenant, scope, key, nonce, payload hash, lease ms, takeover ms.
		// LAST_INSERT_ID(expr) hands the server's now back in the OK
		// packet (Result.LastInsertId; the table has no AUTO_INCREMENT
		// column), so the claim learns the times it wrote without another
		// round trip. The later values refer to started_at, so every time
		// written is that one reading of the clock.
		x := mysqlExecNow
		q.text[stClaim] = `INSERT IGNORE INTO ` + t + ` (tenant, scope, key_hash, record_version, claim_nonce, status, ` +
			`attempt_count, payload_hash, started_at, heartbeat_at, completed_at, expires_at, taken_over_at, takeover_ms) ` +
			`VALUES (?, ?, ?, 1, ?, 'in_progress', 1, ?, LAST_INSERT_ID(` + x + `), started_at, 0, started_at + ?, 0, ?)`
		// MariaDB 10.5+ (INSERT ... RETURNING): the same insert, whose
		// duplicate-key branch changes nothing (key_hash = key_hash) and
		// returns the row found instead, with the server's now read after
		// the row's lock: one round trip for a new key and for a replay.
		q.text[stClaimRet] = `INSERT INTO ` + t + ` (tenant, scope, key_hash, record_version, claim_nonce, status, ` +
			`attempt_count, payload_hash, started_at, heartbeat_at, completed_at, expires_at, taken_over_at, takeover_ms) ` +
			`VALUES (?, ?, ?, 1, ?, 'in_progress', 1, ?, ` + x + `, started_at, 0, started_at + ?, 0, ?) ` +
			`ON DUPLICATE KEY UPDATE key_hash = key_hash RETURNING ` + cols + `, ` + x
		// The claim procedure (MySQL without RETURNING): the INSERT IGNORE
		// above and, when the key exists, the read of stGet, in one round
		// trip. Each statement of a procedure commits on its own under
		// autocommit, as the two statements sent one by one did. Its one
		// result row is 'w' and the time written (LAST_INSERT_ID, as for
		// stClaim) when it inserted, with placeholder columns; or 'r', the
		// server's now and the row found (no row: deleted since the
		// insert), that now read after the row (mysqlExecNow in the select
		// list), so it is never older than a write the read sees. The parameters are declared in the table's character
		// set and collation, wider than the columns (the store checks
		// every length before it calls), so nothing is converted or cut on
		// the way in.
		param := func(name string) string {
			return name + " VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin"
		}
		proc := claimProcedure(table)
		q.proc = `CREATE PROCEDURE ` + proc + ` (` +
			strings.Join([]string{param("p_tenant"), param("p_scope"), param("p_key"), param("p_nonce"), param("p_hash")}, ", ") +
			`, p_lease BIGINT, p_takeover BIGINT) MODIFIES SQL DATA SQL SECURITY INVOKER
BEGIN
  DECLARE wrote INT DEFAULT 0;
  IF NOT EXISTS (SELECT 1 FROM ` + t + ` WHERE key_hash = p_key) THEN
    INSERT IGNORE INTO ` + t + ` (tenant, scope, key_hash, record_version, claim_nonce, status, ` +
			`attempt_count, payload_hash, started_at, heartbeat_at, completed_at, expires_at, taken_over_at, takeover_ms) ` +
			`VALUES (p_tenant, p_scope, p_key, 1, p_nonce, 'in_progress', 1, p_hash, LAST_INSERT_ID(` + x + `), started_at, 0, started_at + p_lease, 0, p_takeover);
    SET wrote = ROW_COUNT();
  END IF;
  IF wrote = 1 THEN
    SELECT 'w', LAST_INSERT_ID(), 1, '', 'in_progress', 1, '', NULL, NULL, NULL, 0, 0, 0, 0, 0, 0;
  ELSE
    SELECT 'r', ` + x + `, ` + cols + ` FROM ` + t + ` WHERE key_hash = p_key;
  END IF;
END`
		q.text[stClaimProc] = `CALL ` + proc + `(?, ?, ?, ?, ?, ?, ?)`
		// new: nonce, attempt, payload hash, result, error message, error
		// type, completed_at, the expiry floor, lease ms, whether it is a
		// takeover, takeover_ms, tenant, scope; then key; then the row as
		// read: nonce, attempt, status, heartbeat_at, expires_at; then
		// whether it is a takeover. The times are the server's now at the
		// UPDATE, handed back by LAST_INSERT_ID. The row must also be as
		// live at the UPDATE's now as the decision found it: live for a
		// takeover, expired for a re-claim (so a takeover decided with a
		// clock older than the row it read, which judged a released row
		// live, is refused and the claim starts over).
		q.text[stCAS] = `UPDATE ` + t + ` SET claim_nonce = ?, status = 'in_progress', attempt_count = ?, ` +
			`payload_hash = ?, result = ?, error_message = ?, error_type = ?, started_at = LAST_INSERT_ID(` + x + `), ` +
			`heartbeat_at = started_at, completed_at = ?, expires_at = GREATEST(?, started_at + ?), ` +
			`taken_over_at = CASE WHEN ? THEN started_at ELSE 0 END, takeover_ms = ?, tenant = ?, scope = ? WHERE ` + where +
			` AND claim_nonce = ? AND attempt_count = ? AND status = ? AND heartbeat_at = ? AND expires_at = ? AND record_version = 1` +
			` AND (expires_at > ` + x + `) = ?`
		// The now after the row (see mysqlExecNow).
		q.text[stGet] = `SELECT ` + cols + `, ` + x + ` FROM ` + t + ` WHERE ` + where
		// Heartbeat, Complete and Release: MySQL counts a row whose values
		// did not change as not affected (a retried complete, two heartbeats
		// in one millisecond), so the affected rows cannot tell a match
		// from a miss. Each sets a column to LAST_INSERT_ID(now) instead: an
		// assignment is evaluated only for a row the WHERE matched, and the
		// OK packet's insert id is then that now, or 0 when no row matched
		// (owned reads Result.LastInsertId). One statement, one answer.
		// lease ms, key, nonce
		q.text[stHeartbeat] = `UPDATE ` + t + ` SET heartbeat_at = LAST_INSERT_ID(` + x + `), ` +
			`expires_at = GREATEST(expires_at, heartbeat_at + ?) WHERE ` +
			where + ` AND claim_nonce = ? AND status = 'in_progress' AND expires_at > ` + x
		// status, result, error message, error type, ttl ms, key, nonce
		q.text[stComplete] = `UPDATE ` + t + ` SET status = ?, result = ?, error_message = ?, error_type = ?, ` +
			`completed_at = LAST_INSERT_ID(` + x + `), heartbeat_at = completed_at, expires_at = completed_at + ? ` +
			`WHERE ` + where + ` AND claim_nonce = ?`
		// key, nonce. LEAST: a release never moves an expiry forward.
		q.text[stRelease] = `UPDATE ` + t + ` SET expires_at = LEAST(expires_at, LAST_INSERT_ID(` + x + `)) WHERE ` + where +
			` AND claim_nonce = ? AND status = 'in_progress'`
		q.readBack = `SELECT claim_nonce, status FROM ` + t + ` WHERE ` + where + ` FOR UPDATE`
		// DoTx's completion: as stComplete, but the matched row's mark is
		// the connection's id (LAST_INSERT_ID(CONNECTION_ID()), never 0),
		// so that a transaction whose COMMIT goes unanswered can be ended
		// with KILL from another connection. Same arguments.
		q.text[stCompleteTx] = `UPDATE ` + t + ` SET status = ?, result = ?, error_message = ?, error_type = ?, ` +
			`completed_at = ` + x + `, heartbeat_at = completed_at, expires_at = completed_at + ?, ` +
			`record_version = IF(LAST_INSERT_ID(CONNECTION_ID()) > 0, record_version, record_version) ` +
			`WHERE ` + where + ` AND claim_nonce = ?`
		q.text[stDelete] = `DELETE FROM ` + t + ` WHERE ` + where
	case SQLite:
		sqliteQueries(&q, table)
	}
	return q
}
