-- heartbeat: KEYS[1] record; ARGV: channel, nonce, lease ms, buffer ms.
-- Reply: {code, detail}; 1 done, 0 not the owner, 3 corrupt.
local k = KEYS[1]
local nonce, lease, buffer = ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local now = now_ms()
local flat, cur, why = load(k)
if why then
  return {CORRUPT, why}
end
if cur == nil or cur.status ~= 'in_progress' or cur.nonce ~= nonce or cur.expires_at <= now then
  return {0, ''}
end
local exp = cur.expires_at
if now + lease > exp then exp = now + lease end
redis.call('HSET', k, 'heartbeat_at', fmt(now), 'expires_at', fmt(exp))
expire(k, exp, now, buffer)
return {1, ''}
