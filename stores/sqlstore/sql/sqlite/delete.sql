-- Delete: ?1 key.
DELETE FROM {{table}} WHERE key_hash = ?1
