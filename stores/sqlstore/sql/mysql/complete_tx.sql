-- DoTx's completion: as complete.sql, but the matched row's mark is the
-- connection's id (LAST_INSERT_ID(CONNECTION_ID()), never 0), so that a
-- transaction whose COMMIT goes unanswered can be ended with KILL from
-- another connection. Same arguments.
UPDATE {{table}} SET status = ?, result = ?, error_message = ?, error_type = ?,
  completed_at = {{now}}, heartbeat_at = completed_at, expires_at = completed_at + ?,
  record_version = IF(LAST_INSERT_ID(CONNECTION_ID()) > 0, record_version, record_version)
WHERE key_hash = ? AND claim_nonce = ?
