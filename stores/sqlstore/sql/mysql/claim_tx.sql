-- DoTx's one-commit claim (onecommit.go), sent on the connection its
-- transaction will run on, before BEGIN, with no parameters: {{key}} is
-- the key and {{lock}} the name of its GET_LOCK lock, both literals built
-- from hex digits. The derived table l is read first (LIMIT 1 keeps it
-- from being merged): unless the key's row is a live completed or failed
-- record in a consistent read (a replay: nothing is locked), it tries the
-- key's lock without waiting: got is 1 when this session now holds it, 0
-- when another session (an open DoTx of the key) does, NULL when it was
-- not tried. Then the row is read with a locking read, which sees the
-- newest committed version and waits for a transaction that wrote the row
-- and has not ended (a DoTx between its completion and its commit). A
-- missing row comes back as defaults with found false; CONNECTION_ID()
-- is the session an unanswered COMMIT is killed by.
SELECT l.got, {{now}}, r.claim_nonce IS NOT NULL, CONNECTION_ID(),
  COALESCE(r.record_version, 1), COALESCE(r.claim_nonce, ''), COALESCE(r.status, 'in_progress'),
  COALESCE(r.attempt_count, 0), COALESCE(r.payload_hash, ''), r.result, r.error_message, r.error_type,
  COALESCE(r.started_at, 0), COALESCE(r.heartbeat_at, 0), COALESCE(r.completed_at, 0),
  COALESCE(r.expires_at, 0), COALESCE(r.taken_over_at, 0), COALESCE(r.takeover_ms, 0), COALESCE(r.owner, '')
FROM (
  SELECT IF(EXISTS (SELECT 1 FROM {{table}} WHERE key_hash = {{key}} AND status <> 'in_progress' AND expires_at > {{now}}),
    NULL, GET_LOCK({{lock}}, 0)) AS got LIMIT 1
) l LEFT JOIN {{table}} r ON r.key_hash = {{key}} LOCK IN SHARE MODE
