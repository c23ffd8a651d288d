-- The claim procedure (MySQL without RETURNING), which Migrate creates
-- and claim_call.sql calls: claim.sql's INSERT IGNORE and, when the key
-- exists, the read of get.sql, in one round trip. Each statement of a
-- procedure commits on its own under autocommit, as the two statements
-- sent one by one did. Its one result row is 'w' and the time written
-- (LAST_INSERT_ID, as in claim.sql) when it inserted, with placeholder
-- columns; or 'r', the server's now, the row found and whether its
-- owner is gone (owner_gone.sql; no row: deleted
-- since the insert), that now read after the row (mysqlExecNow in the select
-- list), so it is never older than a write the read sees. The parameters
-- are declared in the table's character set and collation, wider than the
-- columns (the store checks every length before it calls), so nothing is
-- converted or cut on the way in.
CREATE PROCEDURE {{proc}} (p_tenant VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, p_scope VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, p_key VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, p_nonce VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, p_hash VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin, p_lease BIGINT, p_takeover BIGINT, p_owner VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin) MODIFIES SQL DATA SQL SECURITY INVOKER
BEGIN
  DECLARE wrote INT DEFAULT 0;
  IF NOT EXISTS (SELECT 1 FROM {{table}} WHERE key_hash = p_key) THEN
    INSERT IGNORE INTO {{table}} (tenant, scope, key_hash, record_version, claim_nonce, status, attempt_count, payload_hash, started_at, heartbeat_at, completed_at, expires_at, taken_over_at, takeover_ms, owner) VALUES (p_tenant, p_scope, p_key, 1, p_nonce, 'in_progress', 1, p_hash, LAST_INSERT_ID({{now}}), started_at, 0, started_at + p_lease, 0, p_takeover, p_owner);
    SET wrote = ROW_COUNT();
  END IF;
  IF wrote = 1 THEN
    SELECT 'w', LAST_INSERT_ID(), 1, '', 'in_progress', 1, '', NULL, NULL, NULL, 0, 0, 0, 0, 0, 0, '', 0;
  ELSE
    SELECT 'r', {{now}}, {{cols}}, {{owner_gone_proc}} FROM {{table}} WHERE key_hash = p_key;
  END IF;
END
