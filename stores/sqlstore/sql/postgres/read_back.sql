-- DoTx's locking read of a record row after a failed commit: $1 key.
SELECT claim_nonce, status FROM {{table}} WHERE key_hash = $1 FOR UPDATE
