-- Get: key. The server's now read after the row (see mysqlExecNow).
SELECT {{cols}}, {{now}} FROM {{table}} WHERE key_hash = ?
