-- Get (and the claim's read): ?1 key. The database's now rides along.
SELECT {{cols}}, {{now}} FROM {{table}} WHERE key_hash = ?1
