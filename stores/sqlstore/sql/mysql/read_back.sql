-- DoTx's locking read of a record row after a failed commit: key.
SELECT claim_nonce, status FROM {{table}} WHERE key_hash = ? FOR UPDATE
