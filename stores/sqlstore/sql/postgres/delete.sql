-- Delete: $1 key. The key's advisory lock first (see claim.sql's lk): a
-- claim inserting the key after this delete reads its clock after the
-- delete commits.
WITH l AS MATERIALIZED (SELECT pg_advisory_xact_lock(hashtextextended($1, 0))),
u AS (DELETE FROM {{table}} WHERE key_hash = $1 AND EXISTS (SELECT 1 FROM l) RETURNING key_hash, watched)
SELECT CASE WHEN watched THEN pg_notify('{{channel}}', key_hash) END FROM u
