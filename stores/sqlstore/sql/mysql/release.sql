-- Release: key, nonce. LEAST: a release never moves an expiry forward.
-- LAST_INSERT_ID: see heartbeat.sql.
UPDATE {{table}} SET expires_at = LEAST(expires_at, LAST_INSERT_ID({{now}}))
WHERE key_hash = ? AND claim_nonce = ? AND status = 'in_progress'
