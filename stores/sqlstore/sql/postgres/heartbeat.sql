-- Heartbeat: $1 key, $2 nonce, $3 lease in ms. Heartbeat, Complete and
-- Release read the clock in the row's WHERE and SET (not once, as the
-- claim's clk), so that a write that waited for the row lock judges the
-- row it waited for with the time after the wait (EvalPlanQual evaluates
-- both again for the newest version).
UPDATE {{table}} SET (heartbeat_at, expires_at) = (SELECT n.ck, GREATEST(expires_at, n.ck + $3) FROM (SELECT {{now}} AS ck) n)
WHERE key_hash = $1 AND claim_nonce = $2 AND status = 'in_progress' AND expires_at > {{now}}
