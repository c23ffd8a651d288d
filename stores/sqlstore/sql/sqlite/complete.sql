-- Complete (and DoTx's completion): ?1 key, ?2 nonce, ?3 status, ?4
-- result, ?5 error message, ?6 error type, ?7 ttl ms.
UPDATE {{table}} SET status = ?3, result = ?4, error_message = ?5, error_type = ?6,
  completed_at = {{now}}, heartbeat_at = {{now}}, expires_at = {{now}} + ?7
WHERE key_hash = ?1 AND claim_nonce = ?2
