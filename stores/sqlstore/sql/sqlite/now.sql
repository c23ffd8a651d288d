-- The database's clock, in Unix milliseconds.
SELECT {{now}}
