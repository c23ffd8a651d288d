-- Delete: key.
DELETE FROM {{table}} WHERE key_hash = ?
