-- Complete: status, result, error message, error type, ttl ms, key,
-- nonce. LAST_INSERT_ID: see heartbeat.sql.
UPDATE {{table}} SET status = ?, result = ?, error_message = ?, error_type = ?,
  completed_at = LAST_INSERT_ID({{now}}), heartbeat_at = completed_at, expires_at = completed_at + ?
WHERE key_hash = ? AND claim_nonce = ?
