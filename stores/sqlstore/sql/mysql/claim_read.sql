-- The claim's read of the row it did not insert (a server without
-- RETURNING and without the claim procedure): get.sql's, and whether the
-- row's owner is gone (owner_gone.sql: the claim's nonce and owner), then
-- key.
SELECT {{cols}}, {{now}}, {{owner_gone}} FROM {{table}} WHERE key_hash = ?
