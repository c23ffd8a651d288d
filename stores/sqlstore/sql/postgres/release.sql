-- Release: $1 key, $2 nonce. LEAST: a release never moves the expiry of a
-- record already released (or expired) forward, where a Get that read its
-- now before would see it live again.
WITH u AS (UPDATE {{table}} SET expires_at = LEAST(expires_at, {{now}})
  WHERE key_hash = $1 AND claim_nonce = $2 AND status = 'in_progress' RETURNING key_hash, watched)
SELECT CASE WHEN watched THEN pg_notify('{{channel}}', key_hash) END FROM u
