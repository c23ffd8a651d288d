-- Release: ?1 key, ?2 nonce. min: a release never moves an expiry
-- forward.
UPDATE {{table}} SET expires_at = min(expires_at, {{now}})
WHERE key_hash = ?1 AND claim_nonce = ?2 AND status = 'in_progress'
