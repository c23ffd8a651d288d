-- release: KEYS[1] record; ARGV: channel, nonce, buffer ms.
-- The record is kept with expires_at = now so the next claim continues its
-- attempt number.
-- Reply: {code, detail}; 1 done, 0 not the owner, 3 corrupt.
local k = KEYS[1]
local channel, nonce, buffer = ARGV[1], ARGV[2], tonumber(ARGV[3])
local now = now_ms()
local flat, cur, why = load(k)
if why then
  return {CORRUPT, why}
end
if cur == nil or cur.status ~= 'in_progress' or cur.nonce ~= nonce then
  return {0, ''}
end
redis.call('HSET', k, 'expires_at', fmt(now))
expire(k, now, now, buffer)
redis.call('PUBLISH', channel, 'released')
return {1, ''}
