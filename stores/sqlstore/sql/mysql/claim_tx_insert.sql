-- DoTx's one-commit completion of a key that had no row (onecommit.go):
-- the record with its outcome. A row inserted since the claim read the
-- key is a duplicate-key error: the claim is lost. ? in order: tenant,
-- scope, key, nonce, status, attempt, payload hash, result, error
-- message, error type, started_at, ttl in ms, taken_over_at, takeover
-- threshold in ms, owner. A value may refer to a column set before it.
INSERT INTO {{table}} (tenant, scope, key_hash, record_version, claim_nonce, status, attempt_count, payload_hash,
  result, error_message, error_type, started_at, heartbeat_at, completed_at, expires_at, taken_over_at, takeover_ms, owner)
VALUES (?, ?, ?, 1, ?, ?, ?, ?, ?, ?, ?, ?, {{now}}, heartbeat_at, heartbeat_at + ?, ?, ?, ?)
