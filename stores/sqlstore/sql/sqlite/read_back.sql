-- DoTx's read of a record row after a failed commit: ?1 key. The
-- transaction that wrote the record is over when its commit returns,
-- whatever it returned: a plain read tells which way it went.
SELECT claim_nonce, status FROM {{table}} WHERE key_hash = ?1
