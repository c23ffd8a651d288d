-- DoTx's one-commit completion (onecommit.go), the last statement of its
-- transaction: the claim's record written with its outcome, conditioned
-- on the row being as the claim read it (no row: $14 is '' and the insert
-- meets no conflicting row; a row: its nonce, attempt, heartbeat and
-- expiry unchanged). $1 tenant, $2 scope, $3 key, $4 nonce, $5 payload
-- hash, $6 status, $7 result, $8 error message, $9 error type, $10 ttl in
-- ms, $11 attempt, $12 takeover threshold in ms, $13 owner, $14-$17 the
-- row as read (nonce, attempt, heartbeat_at, expires_at), $18 the claim's
-- time, $19 taken_over_at (the claim's time for a takeover, else 0).
--
-- lk first takes the key's advisory lock at transaction level (this
-- session holds it at session level since the claim, so it is granted at
-- once) and then lets go of the session-level hold: from here the lock is
-- the transaction's and ends with its commit or rollback, so no other
-- session can take it between this statement and the commit. A waiter
-- that LISTENs for the row (a takeover of a watched row) is notified at
-- the commit, as complete.sql does.
WITH lk AS MATERIALIZED (
  SELECT pg_advisory_unlock(hashtextextended($3, 0)) AS u
  FROM (SELECT pg_advisory_xact_lock(hashtextextended($3, 0)) OFFSET 0) x
), n AS MATERIALIZED (SELECT {{now}} AS ck FROM lk), w AS (
  INSERT INTO {{table}} AS r (tenant, scope, key_hash, record_version, claim_nonce, status, attempt_count,
    payload_hash, result, error_message, error_type, started_at, heartbeat_at, completed_at, expires_at, taken_over_at, takeover_ms, owner)
  SELECT $1, $2, $3, 1, $4, $6, $11, $5, $7, $8, $9, $18, n.ck, n.ck, n.ck + $10, $19, $12, $13 FROM n
  ON CONFLICT (key_hash) DO UPDATE SET
    (tenant, scope, claim_nonce, status, attempt_count, payload_hash, result, error_message, error_type,
     started_at, heartbeat_at, completed_at, expires_at, taken_over_at, takeover_ms, owner) =
    (EXCLUDED.tenant, EXCLUDED.scope, EXCLUDED.claim_nonce, EXCLUDED.status, EXCLUDED.attempt_count, EXCLUDED.payload_hash,
     EXCLUDED.result, EXCLUDED.error_message, EXCLUDED.error_type, EXCLUDED.started_at, EXCLUDED.heartbeat_at,
     EXCLUDED.completed_at, EXCLUDED.expires_at, EXCLUDED.taken_over_at, EXCLUDED.takeover_ms, EXCLUDED.owner)
  WHERE r.claim_nonce = $14 AND r.attempt_count = $15 AND r.heartbeat_at = $16 AND r.expires_at = $17
  RETURNING r.key_hash, r.watched
)
SELECT CASE WHEN watched THEN pg_notify('{{channel}}', key_hash) END FROM w
