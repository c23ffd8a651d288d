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
local set = {'status', status, 'completed_at', fmt(now), 'heartbeat_at', fmt(now), 'expires_at', fmt(exp)}
local del = {}
if ARGV[6] == '1' then
  set[#set + 1] = 'result'; set[#set + 1] = ARGV[7]
else
  del[#del + 1] = 'result'
end
if ARGV[8] == '1' then
  set[#set + 1] = 'err_msg'; set[#set + 1] = ARGV[9]
  set[#set + 1] = 'err_type'; set[#set + 1] = ARGV[10]
else
  del[#del + 1] = 'err_msg'; del[#del + 1] = 'err_type'
end
redis.call('HSET', k, unpack(set))
if #del > 0 then redis.call('HDEL', k, unpack(del)) end
expire(k, exp, now, buffer)
redis.call('PUBLISH', channel, status)
return {1, ''}
