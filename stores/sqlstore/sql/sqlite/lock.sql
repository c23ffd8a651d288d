-- A write that changes nothing: the first statement of the store's
-- transactions, which takes the database's write lock (waiting for it up
-- to busy_timeout) before anything is read.
UPDATE {{table}} SET tenant = tenant WHERE 0
