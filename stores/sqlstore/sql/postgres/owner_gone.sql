-- Whether the in-progress row {{row}} is the claim $9 (its nonce) of an
-- owner that is gone: sent only after the plain claim met that live claim
-- of another process (claimPostgres). $10 is the owner's presence token:
-- gone when no session holds its advisory lock in this database's owner
-- lock space (presence.go); '' when the owner is gone for another reason
-- (an earlier incarnation of the claiming process's instance), with no
-- lock to read.
{{row}}.claim_nonce = $9 AND ($10 = '' OR NOT EXISTS (SELECT 1 FROM pg_locks l
  WHERE l.locktype = 'advisory' AND l.classid = {{owner_class}} AND l.objid = hashtext($10)::oid
    AND l.objsubid = 2 AND l.granted AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())))
