-- The claim's write, inside its transaction, of the record
-- storekit.DecideClaim made: tenant, scope, key, nonce, status, attempt,
-- payload hash, result, error message, error type, started_at,
-- heartbeat_at, completed_at, expires_at, taken_over_at, takeover_ms,
-- owner.
INSERT INTO {{table}} (tenant, scope, key_hash, record_version, claim_nonce, status, attempt_count,
  payload_hash, result, error_message, error_type, started_at, heartbeat_at, completed_at, expires_at, taken_over_at, takeover_ms, owner)
VALUES (?1, ?2, ?3, 1, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17)
ON CONFLICT (key_hash) DO UPDATE SET tenant = excluded.tenant, scope = excluded.scope, record_version = 1,
  claim_nonce = excluded.claim_nonce, status = excluded.status, attempt_count = excluded.attempt_count,
  payload_hash = excluded.payload_hash, result = excluded.result, error_message = excluded.error_message,
  error_type = excluded.error_type, started_at = excluded.started_at, heartbeat_at = excluded.heartbeat_at,
  completed_at = excluded.completed_at, expires_at = excluded.expires_at, taken_over_at = excluded.taken_over_at,
  takeover_ms = excluded.takeover_ms, owner = excluded.owner
