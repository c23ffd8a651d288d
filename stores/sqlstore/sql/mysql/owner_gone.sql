-- Whether the owner of an in-progress row of another claim (the claim's
-- nonce and owner are the two parameters) is known gone: its presence
-- token (what follows the owner's last '/') names a lock (GET_LOCK, held
-- by each process's presence connection, presence.go) that no session
-- holds. 1 gone, 0 not or not asked. Only such a row asks the server's
-- lock table; the store decides the rest (storekit.DecideClaimGone:
-- staleness, the payload hash, an earlier incarnation).
CASE WHEN status = 'in_progress' AND claim_nonce <> ? AND owner <> '' AND owner <> ?
    AND SUBSTRING_INDEX(owner, '/', -1) <> ''
  THEN IS_USED_LOCK(CONCAT('{{owner_lock}}', SUBSTRING_INDEX(owner, '/', -1))) IS NULL ELSE 0 END
