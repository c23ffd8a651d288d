-- Get: $1 key. The server's now rides along (an InitPlan, evaluated once).
SELECT {{cols}}, (SELECT {{now}}) FROM {{table}} WHERE key_hash = $1
