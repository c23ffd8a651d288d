-- DoTx's one-commit completion of a key whose row the claim replaces
-- (expired, released, or a stale claim: onecommit.go), conditioned on the
-- row being as the claim read it. ? in order: tenant, scope, nonce,
-- status, attempt, payload hash, result, error message, error type,
-- started_at, ttl in ms, taken_over_at, takeover threshold in ms, owner,
-- then key and the row as read: nonce, attempt, heartbeat_at, expires_at.
-- The WHERE judges the row as it was before the assignments.
UPDATE {{table}} SET tenant = ?, scope = ?, claim_nonce = ?, status = ?, attempt_count = ?, payload_hash = ?,
  result = ?, error_message = ?, error_type = ?, started_at = ?, heartbeat_at = {{now}}, completed_at = heartbeat_at,
  expires_at = heartbeat_at + ?, taken_over_at = ?, takeover_ms = ?, owner = ?
WHERE key_hash = ? AND claim_nonce = ? AND attempt_count = ? AND heartbeat_at = ? AND expires_at = ?
