-- MariaDB 10.5+ (INSERT ... RETURNING): claim.sql's insert, whose
-- duplicate-key branch changes nothing (key_hash = key_hash) and returns
-- the row found instead, with the server's now read after the row's
-- lock: one round trip for a new key and for a replay. Same arguments,
-- then the nonce and the owner again (owner_gone.sql, last column).
INSERT INTO {{table}} (tenant, scope, key_hash, record_version, claim_nonce, status,
  attempt_count, payload_hash, started_at, heartbeat_at, completed_at, expires_at, taken_over_at, takeover_ms, owner)
VALUES (?, ?, ?, 1, ?, 'in_progress', 1, ?, {{now}}, started_at, 0, started_at + ?, 0, ?, ?)
ON DUPLICATE KEY UPDATE key_hash = key_hash RETURNING {{cols}}, {{now}}, {{owner_gone}}
