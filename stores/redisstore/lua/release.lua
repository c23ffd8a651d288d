-- release: KEYS[1] record; ARGV: channel, nonce, retention ms, key.
-- The record is kept (in progress, expires_at = now) for the retention so
-- the next claim continues its attempt number. It publishes only when a
-- waiter marked the record (watch.lua).
-- Reply: 1 done, 0 not the owner, 'X'..why corrupt.
local k = KEYS[1]
local v, why = get(k)
if v == nil then return 'X' .. why end
if not v then return 0 end
local nl, pl = check(v, ARGV[4])
if nl == nil then return 'X' .. pl end
if string.byte(v, 3) ~= 80 or string.sub(v, 123, 122 + nl) ~= ARGV[2] then
  return 0
end
local now = now_ms()
redis.call('SET', k, 'R3' .. string.sub(v, 3, 4) .. fmt(now) .. string.sub(v, 18),
  'PXAT', string.format('%.0f', now + tonumber(ARGV[3])))
if watched(v) then redis.call('PUBLISH', ARGV[1], 'r') end
return 1
