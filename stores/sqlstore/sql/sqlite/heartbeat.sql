-- Heartbeat: ?1 key, ?2 nonce, ?3 lease ms.
UPDATE {{table}} SET heartbeat_at = {{now}}, expires_at = max(expires_at, {{now}} + ?3)
WHERE key_hash = ?1 AND claim_nonce = ?2 AND status = 'in_progress' AND expires_at > {{now}}
