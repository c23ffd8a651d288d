-- Watch: $1 key. The flag stays for the row's life (a takeover keeps it,
-- so the new owner's completion wakes waiters still watching), and only
-- rows once waited on pay for a notification.
UPDATE {{table}} SET watched = true WHERE key_hash = $1 AND NOT watched
