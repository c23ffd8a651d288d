-- The claim's insert: tenant, scope, key, nonce, payload hash, lease ms,
-- takeover ms, owner. LAST_INSERT_ID(expr) hands the server's now back in the OK
-- packet (Result.LastInsertId; the table has no AUTO_INCREMENT column),
-- so the claim learns the times it wrote without another round trip. The
-- later values refer to started_at, so every time written is that one
-- reading of the clock.
INSERT IGNORE INTO {{table}} (tenant, scope, key_hash, record_version, claim_nonce, status,
  attempt_count, payload_hash, started_at, heartbeat_at, completed_at, expires_at, taken_over_at, takeover_ms, owner)
VALUES (?, ?, ?, 1, ?, 'in_progress', 1, ?, LAST_INSERT_ID({{now}}), started_at, 0, started_at + ?, 0, ?, ?)
