-- Heartbeat: lease ms, key, nonce.
--
-- Heartbeat, Complete and Release: MySQL counts a row whose values did
-- not change as not affected (a retried complete, two heartbeats in one
-- millisecond), so the affected rows cannot tell a match from a miss.
-- Each sets a column to LAST_INSERT_ID(now) instead: an assignment is
-- evaluated only for a row the WHERE matched, and the OK packet's insert
-- id is then that now, or 0 when no row matched (owned reads
-- Result.LastInsertId). One statement, one answer.
UPDATE {{table}} SET heartbeat_at = LAST_INSERT_ID({{now}}), expires_at = GREATEST(expires_at, heartbeat_at + ?)
WHERE key_hash = ? AND claim_nonce = ? AND status = 'in_progress' AND expires_at > {{now}}
