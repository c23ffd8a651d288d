-- The claim: $1 tenant, $2 scope, $3 key, $4 nonce, $5 payload hash, $6
-- lease in ms, $7 the caller's takeover threshold in ms (stored with the
-- claim; a row is stale by its own stored threshold, or by $7 when it has
-- none), $8 the claim's owner; in stClaimGone, $9 and $10 name a live
-- claim of another process that it may take over if that claim's owner
-- is gone (owner_gone.sql). clk.ms is the server's now, read once.
--
-- cur is the row in the statement's snapshot. When it is live and not
-- claimable (the replay of a completed key, a live claim) the INSERT
-- selects no row, so the statement only reads: no row lock, no
-- transaction id, no WAL flush at commit. Otherwise the upsert runs, and
-- the conflict update's WHERE applies storekit.DecideClaim to the newest
-- committed version of the row (claimable.sql). The conflict update
-- judges expiry, and writes the row, with the server's clock read after
-- the row is locked (not clk.ms, read before a wait for a concurrent
-- writer: a claim that waited behind a Release must see the released row
-- as released, and re-claim it, not take it over); its SET reads the
-- clock once, in a sub-SELECT evaluated for the locked row. A new row's
-- times are lk.ms: the clock read after the key's advisory lock and a
-- lock on the key's row in the snapshot (lk is only evaluated when the
-- INSERT selects its row, so a replay locks nothing). The insert's values
-- are built before it meets a conflicting row, and when that row is being
-- deleted it waits, then inserts them: a Delete holds the advisory lock
-- (so does a claim that inserts, whose row a later Delete may remove
-- while this one waits), and Purge's rows were in the snapshot, so the
-- clock lk reads is never older than the delete the insert waited for
-- (TestClaimBehindDelete). With clk.ms instead, the new claim's heartbeat
-- would be older than the claim by the wait. Staleness (a takeover) is
-- judged with clk.ms, the earlier time: a heartbeat stale then is stale
-- after the wait too, and one that is not is refused here (the statement
-- is sent again, with a newer clock, when its snapshot says the row was
-- claimable), so claims queued behind a takeover's lock do not take over
-- the claim they waited for as soon as their wait outlasts the threshold.
-- When nothing is written, the last branch returns cur (see claimPostgres
-- for why that snapshot is checked). Every row returned carries clk.ms,
-- so the store checks it by the same clock, and whether a row written
-- took over one live and not stale in the snapshot: a takeover of a gone
-- owner (ClaimResult.OwnerGone).
--
-- pg_advisory_xact_lock(hashtextextended($3, 0)) is the key's
-- transaction-level advisory lock, which a claim that inserts and a
-- Delete hold until they commit.
WITH clk AS MATERIALIZED (SELECT {{now}} AS ms), cur AS (
  SELECT {{cols}} FROM {{table}} WHERE key_hash = $3
), lk AS MATERIALIZED (
  SELECT CASE WHEN (SELECT count(*) FROM (SELECT pg_advisory_xact_lock(hashtextextended($3, 0))) a) = 1 THEN
    CASE WHEN (SELECT count(*) FROM (SELECT 1 FROM {{table}} WHERE key_hash = $3 FOR UPDATE) l) >= 0
      THEN {{now}} END END AS ms
), w AS (
  INSERT INTO {{table}} AS r (tenant, scope, key_hash, record_version, claim_nonce, status, attempt_count,
    payload_hash, result, error_message, error_type, started_at, heartbeat_at, completed_at, expires_at, taken_over_at, takeover_ms, owner)
  SELECT $1, $2, $3, 1, $4, 'in_progress', 1, $5, NULL, NULL, NULL, lk.ms, lk.ms, 0, lk.ms + $6, 0, $7, $8 FROM lk
  WHERE NOT EXISTS (SELECT 1 FROM cur) OR EXISTS (SELECT 1 FROM cur, clk WHERE {{claimable_cur}})
  ON CONFLICT (key_hash) DO UPDATE SET
    (tenant, scope, claim_nonce, status, attempt_count, payload_hash, result, error_message, error_type,
     started_at, heartbeat_at, completed_at, expires_at, taken_over_at, takeover_ms, owner) =
    (SELECT EXCLUDED.tenant, EXCLUDED.scope, EXCLUDED.claim_nonce, 'in_progress', r.attempt_count + 1, EXCLUDED.payload_hash,
       CASE WHEN r.expires_at <= n.ck THEN NULL ELSE r.result END,
       CASE WHEN r.expires_at <= n.ck THEN NULL ELSE r.error_message END,
       CASE WHEN r.expires_at <= n.ck THEN NULL ELSE r.error_type END,
       n.ck, n.ck,
       CASE WHEN r.expires_at <= n.ck THEN 0 ELSE r.completed_at END,
       CASE WHEN r.expires_at <= n.ck THEN n.ck + $6 ELSE GREATEST(r.expires_at, n.ck + $6) END,
       CASE WHEN r.expires_at <= n.ck THEN 0 ELSE n.ck END,
       EXCLUDED.takeover_ms, EXCLUDED.owner
     FROM (SELECT {{now}} AS ck) n)
  WHERE {{claimable_locked}}
  RETURNING r.record_version, r.claim_nonce, r.status, r.attempt_count, r.payload_hash, r.result,
    r.error_message, r.error_type, r.started_at, r.heartbeat_at, r.completed_at, r.expires_at, r.taken_over_at, r.takeover_ms, r.owner
)
SELECT 'w'::text, clk.ms, EXISTS (SELECT 1 FROM cur WHERE cur.status = 'in_progress' AND cur.expires_at > clk.ms
    AND clk.ms - cur.heartbeat_at < CASE WHEN cur.takeover_ms > 0 THEN cur.takeover_ms ELSE $7 END), w.* FROM w, clk
UNION ALL
SELECT 'e'::text, clk.ms, false, cur.* FROM cur, clk WHERE NOT EXISTS (SELECT 1 FROM w)
