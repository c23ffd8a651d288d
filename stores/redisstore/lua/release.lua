-- release: KEYS[1] record; ARGV: channel, nonce, retention ms, key.
-- The record is kept with expires_at = now so the next claim continues its
-- attempt number.
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
redis.call('SET', k, string.sub(v, 1, 4) .. fmt(now) .. string.sub(v, 18),
  'PXAT', string.format('%.0f', now + tonumber(ARGV[3])))
redis.call('PUBLISH', ARGV[1], 'r')
return 1
