-- DoTx's one-commit claim (onecommit.go), sent on the connection its
-- transaction will run on, before BEGIN: $1 key. It reads the key's row
-- (cur) and the server's clock, and, unless the row is a live completed or
-- failed record (a replay: then nothing is locked), tries the key's
-- session-level advisory lock, the lock the claim statement (claim.sql)
-- and Delete take at transaction level: got is true when this session now
-- holds it, false when another session's open DoTx (or a claim inserting
-- the key, or a Delete) holds it, NULL when it was not tried. CASE
-- evaluates pg_try_advisory_lock only in the branch it takes. A missing
-- row comes back as a row of defaults with found false.
WITH clk AS MATERIALIZED (SELECT {{now}} AS ms), cur AS (
  SELECT {{cols}} FROM {{table}} WHERE key_hash = $1
), lk AS MATERIALIZED (
  SELECT CASE WHEN NOT EXISTS (SELECT 1 FROM cur, clk WHERE cur.status <> 'in_progress' AND cur.expires_at > clk.ms)
    THEN pg_try_advisory_lock(hashtextextended($1, 0)) END AS got
)
SELECT lk.got, clk.ms, cur.claim_nonce IS NOT NULL,
  COALESCE(cur.record_version, 1), COALESCE(cur.claim_nonce, ''), COALESCE(cur.status, 'in_progress'),
  COALESCE(cur.attempt_count, 0), COALESCE(cur.payload_hash, ''), cur.result, cur.error_message, cur.error_type,
  COALESCE(cur.started_at, 0), COALESCE(cur.heartbeat_at, 0), COALESCE(cur.completed_at, 0),
  COALESCE(cur.expires_at, 0), COALESCE(cur.taken_over_at, 0), COALESCE(cur.takeover_ms, 0), COALESCE(cur.owner, '')
FROM clk CROSS JOIN lk LEFT JOIN cur ON true
