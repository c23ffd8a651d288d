-- Complete (and DoTx's completion): $1 key, $2 nonce, $3 status, $4
-- result, $5 error message, $6 error type, $7 ttl in ms.
--
-- The notification is sent when the statement commits, only if it changed
-- the row; affected rows are the rows of the final SELECT. The channel is
-- letters, digits, underscores and dots (WithTable), so it is a plain
-- string literal. pg_notify runs only for a row a waiter marked watched
-- (CASE evaluates the branch it takes, and pg_notify is volatile, so it
-- is never folded); the SELECT returns one row per changed row either
-- way, so affected rows count the change. release.sql and delete.sql
-- notify the same way.
WITH u AS (UPDATE {{table}} SET status = $3, result = $4, error_message = $5, error_type = $6,
  (completed_at, heartbeat_at, expires_at) = (SELECT n.ck, n.ck, n.ck + $7 FROM (SELECT {{now}} AS ck) n)
  WHERE key_hash = $1 AND claim_nonce = $2 RETURNING key_hash, watched)
SELECT CASE WHEN watched THEN pg_notify('{{channel}}', key_hash) END FROM u
