-- The conditional takeover or re-claim. New: nonce, attempt, payload
-- hash, result, error message, error type, completed_at, the expiry
-- floor, lease ms, whether it is a takeover, takeover_ms, tenant, scope,
-- owner;
-- then key; then the row as read: nonce, attempt, status, heartbeat_at,
-- expires_at; then whether it is a takeover. The times are the server's
-- now at the UPDATE, handed back by LAST_INSERT_ID. The row must also be
-- as live at the UPDATE's now as the decision found it: live for a
-- takeover, expired for a re-claim (so a takeover decided with a clock
-- older than the row it read, which judged a released row live, is
-- refused and the claim starts over).
UPDATE {{table}} SET claim_nonce = ?, status = 'in_progress', attempt_count = ?,
  payload_hash = ?, result = ?, error_message = ?, error_type = ?, started_at = LAST_INSERT_ID({{now}}),
  heartbeat_at = started_at, completed_at = ?, expires_at = GREATEST(?, started_at + ?),
  taken_over_at = CASE WHEN ? THEN started_at ELSE 0 END, takeover_ms = ?, tenant = ?, scope = ?, owner = ?
WHERE key_hash = ? AND claim_nonce = ? AND attempt_count = ? AND status = ? AND heartbeat_at = ? AND expires_at = ? AND record_version = 1
  AND (expires_at > {{now}}) = ?
