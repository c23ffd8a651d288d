-- Purge: one statement per batch, under the write lock: the rows expired
-- past retention (?2 ms) by the database's clock, oldest first, from ?1
-- on, at most ?3.
DELETE FROM {{table}} WHERE key_hash IN (SELECT key_hash FROM {{table}}
  WHERE expires_at >= ?1 AND expires_at < {{now}} - ?2 ORDER BY expires_at LIMIT ?3) RETURNING expires_at
