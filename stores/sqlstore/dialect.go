package sqlstore

import (
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
	stPurge
	numStmts
)

// queries holds the text of every statement for one table and dialect.
type queries struct {
	create []string
	text   [numStmts]string
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

func buildQueries(d Dialect, table string) queries {
	t, idx := quote(d, table)
	var q queries
	switch d {
	case Postgres:
		where := "key_hash = $1"
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
  PRIMARY KEY (key_hash)
)`,
			`CREATE INDEX IF NOT EXISTS ` + idx + ` ON ` + t + ` (expires_at)`,
		}
		// $1 tenant, $2 scope, $3 key, $4 nonce, $5 payload hash, $6 now,
		// $7 now + lease, $8 the caller's takeover threshold in ms (stored
		// with the claim; a row is stale by its own stored threshold, or by
		// $8 when it has none).
		//
		// cur is the row in the statement's snapshot. When it is live and
		// not claimable (the replay of a completed key, a live claim) the
		// INSERT selects no row, so the statement only reads: no row lock,
		// no transaction id, no WAL flush at commit. Otherwise the upsert
		// runs, and the conflict update's WHERE applies storekit.DecideClaim
		// to the newest committed version of the row: it has expired, or
		// it is an in-progress claim with the same payload hash, another
		// nonce and a stale heartbeat (and in both cases it is decodable).
		// When nothing is written, the last branch returns cur (see
		// claimPostgres for why that snapshot is checked).
		claimable := `%[4]s.record_version = 1 AND %[4]s.attempt_count >= 1 AND %[4]s.claim_nonce <> ''
    AND %[4]s.status IN ('in_progress', 'completed', 'failed')
    AND (%[4]s.status <> 'failed' OR %[4]s.error_message IS NOT NULL)
    AND (%[4]s.error_type IS NULL OR %[4]s.error_message IS NOT NULL)
    AND (%[4]s.expires_at <= $6
      OR (%[4]s.status = 'in_progress' AND %[4]s.payload_hash = $5
          AND %[4]s.claim_nonce <> $4
          AND $6 - %[4]s.heartbeat_at >= CASE WHEN %[4]s.takeover_ms > 0 THEN %[4]s.takeover_ms ELSE $8 END))`
		q.text[stClaim] = fmt.Sprintf(`WITH cur AS (
  SELECT %[2]s FROM %[1]s WHERE key_hash = $3
), w AS (
  INSERT INTO %[1]s AS r (tenant, scope, key_hash, record_version, claim_nonce, status, attempt_count,
    payload_hash, result, error_message, error_type, started_at, heartbeat_at, completed_at, expires_at, taken_over_at, takeover_ms)
  SELECT $1, $2, $3, 1, $4, 'in_progress', 1, $5, NULL, NULL, NULL, $6, $6, 0, $7, 0, $8
  WHERE NOT EXISTS (SELECT 1 FROM cur) OR EXISTS (SELECT 1 FROM cur WHERE `+fmt.Sprintf(claimable, "", "", "", "cur")+`)
  ON CONFLICT (key_hash) DO UPDATE SET
    tenant        = EXCLUDED.tenant,
    scope         = EXCLUDED.scope,
    claim_nonce   = EXCLUDED.claim_nonce,
    status        = 'in_progress',
    attempt_count = r.attempt_count + 1,
    payload_hash  = EXCLUDED.payload_hash,
    result        = CASE WHEN r.expires_at <= $6 THEN NULL ELSE r.result END,
    error_message = CASE WHEN r.expires_at <= $6 THEN NULL ELSE r.error_message END,
    error_type    = CASE WHEN r.expires_at <= $6 THEN NULL ELSE r.error_type END,
    started_at    = $6,
    heartbeat_at  = $6,
    completed_at  = CASE WHEN r.expires_at <= $6 THEN 0 ELSE r.completed_at END,
    expires_at    = CASE WHEN r.expires_at <= $6 THEN $7 ELSE GREATEST(r.expires_at, $7) END,
    taken_over_at = CASE WHEN r.expires_at <= $6 THEN 0 ELSE $6 END,
    takeover_ms   = $8
  WHERE `+fmt.Sprintf(claimable, "", "", "", "r")+`
  RETURNING r.record_version, r.claim_nonce, r.status, r.attempt_count, r.payload_hash, r.result,
    r.error_message, r.error_type, r.started_at, r.heartbeat_at, r.completed_at, r.expires_at, r.taken_over_at, r.takeover_ms
)
SELECT 'w'::text, * FROM w
UNION ALL
SELECT 'e'::text, * FROM cur WHERE NOT EXISTS (SELECT 1 FROM w)`, t, cols)
		q.text[stGet] = `SELECT ` + cols + ` FROM ` + t + ` WHERE ` + where
		// $1 key, $2 nonce, $3 now, $4 now + lease
		q.text[stHeartbeat] = `UPDATE ` + t + ` SET heartbeat_at = $3, expires_at = GREATEST(expires_at, $4) WHERE ` +
			where + ` AND claim_nonce = $2 AND status = 'in_progress' AND expires_at > $3`
		// $1 key, $2 nonce, $3 status, $4 result, $5 error message, $6 error type, $7 now, $8 now + ttl
		q.text[stComplete] = `UPDATE ` + t + ` SET status = $3, result = $4, error_message = $5, error_type = $6, ` +
			`completed_at = $7, heartbeat_at = $7, expires_at = $8 WHERE ` + where + ` AND claim_nonce = $2`
		// $1 key, $2 nonce, $3 now
		q.text[stRelease] = `UPDATE ` + t + ` SET expires_at = $3 WHERE ` + where +
			` AND claim_nonce = $2 AND status = 'in_progress'`
		q.text[stDelete] = `DELETE FROM ` + t + ` WHERE ` + where
		q.text[stPurge] = `DELETE FROM ` + t + ` WHERE expires_at < $1`
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
		// tenant, scope, key, nonce, payload hash, now, now, now + lease, takeover ms
		q.text[stClaim] = `INSERT IGNORE INTO ` + t + ` (tenant, scope, key_hash, record_version, claim_nonce, status, ` +
			`attempt_count, payload_hash, started_at, heartbeat_at, completed_at, expires_at, taken_over_at, takeover_ms) ` +
			`VALUES (?, ?, ?, 1, ?, 'in_progress', 1, ?, ?, ?, 0, ?, 0, ?)`
		// new: nonce, attempt, payload hash, result, error message,
		// error type, started_at, heartbeat_at, completed_at, expires_at,
		// taken_over_at, takeover_ms, tenant, scope; then key; then the row as read:
		// nonce, attempt, status, heartbeat_at, expires_at.
		q.text[stCAS] = `UPDATE ` + t + ` SET claim_nonce = ?, status = 'in_progress', attempt_count = ?, ` +
			`payload_hash = ?, result = ?, error_message = ?, error_type = ?, started_at = ?, heartbeat_at = ?, ` +
			`completed_at = ?, expires_at = ?, taken_over_at = ?, takeover_ms = ?, tenant = ?, scope = ? WHERE ` + where +
			` AND claim_nonce = ? AND attempt_count = ? AND status = ? AND heartbeat_at = ? AND expires_at = ? AND record_version = 1`
		q.text[stGet] = `SELECT ` + cols + ` FROM ` + t + ` WHERE ` + where
		// now, now + lease, key..., nonce, now
		q.text[stHeartbeat] = `UPDATE ` + t + ` SET heartbeat_at = ?, expires_at = GREATEST(expires_at, ?) WHERE ` +
			where + ` AND claim_nonce = ? AND status = 'in_progress' AND expires_at > ?`
		// status, result, error message, error type, now, now, now + ttl, key..., nonce
		q.text[stComplete] = `UPDATE ` + t + ` SET status = ?, result = ?, error_message = ?, error_type = ?, ` +
			`completed_at = ?, heartbeat_at = ?, expires_at = ? WHERE ` + where + ` AND claim_nonce = ?`
		// now, key..., nonce
		q.text[stRelease] = `UPDATE ` + t + ` SET expires_at = ? WHERE ` + where +
			` AND claim_nonce = ? AND status = 'in_progress'`
		q.text[stDelete] = `DELETE FROM ` + t + ` WHERE ` + where
		q.text[stPurge] = `DELETE FROM ` + t + ` WHERE expires_at < ?`
	}
	return q
}
