-- Whether the owner of the in-progress row {{row}} is known gone
-- (storekit.DecideClaimGone): another process's ($8 is the claim's
-- owner) that is an earlier incarnation of the claiming process's
-- instance (it starts with the instance prefix $9 and not with the
-- incarnation prefix $10, storekit.OwnerPrefixes; both '' for a process
-- without an instance), or whose presence token (what follows the owner's
-- last '/') names no granted session advisory lock in this database's
-- owner lock space (presence.go): its session, and so its process, is
-- gone. CASE keeps the lock table's read for the rows that get this far.
CASE WHEN {{row}}.owner = '' OR {{row}}.owner = $8 THEN false
  WHEN $9 <> '' AND left({{row}}.owner, length($9)) = $9 AND left({{row}}.owner, length($10)) <> $10 THEN true
  WHEN regexp_replace({{row}}.owner, '^.*/', '') = '' THEN false
  ELSE NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.classid = {{owner_class}}
    AND l.objid = hashtext(regexp_replace({{row}}.owner, '^.*/', ''))::oid AND l.objsubid = 2 AND l.granted
    AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database()))
END
