-- complete: KEYS[1] record; ARGV: channel, nonce, status, ttl ms, buffer ms,
-- has result ('1'/'0'), result, has error ('1'/'0'), error message,
-- error type.
-- Reply: {code, detail}; 1 done, 0 not the owner, 3 corrupt.
local k = KEYS[1]
local channel, nonce, status = ARGV[1], ARGV[2], ARGV[3]
local ttl, buffer = tonumber(ARGV[4]), tonumber(ARGV[5])
local now = now_ms()
local flat, cur, why = load(k)
if why then
  return {CORRUPT, why}
end
if cur == nil or cur.nonce ~= nonce then
  return {0, ''}
end
local exp = now + ttl
redis.call('HSET', k, 'status', status, 'completed_at', fmt(now),
  'heartbeat_at', fmt(now), 'expires_at', fmt(exp))
if ARGV[6] == '1' then
  redis.call('HSET', k, 'result', ARGV[7])
else
  redis.call('HDEL', k, 'result')
end
if ARGV[8] == '1' then
  redis.call('HSET', k, 'err_msg', ARGV[9], 'err_type', ARGV[10])
else
  redis.call('HDEL', k, 'err_msg', 'err_type')
end
expire(k, exp, now, buffer)
redis.call('PUBLISH', channel, status)
return {1, ''}
