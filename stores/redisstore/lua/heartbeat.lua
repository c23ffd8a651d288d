-- heartbeat: KEYS[1] record; ARGV: channel, nonce, lease ms, retention ms, key.
-- Reply: 1 done, 0 not the owner, 'X'..why corrupt.
local k = KEYS[1]
local v, why = get(k)
if v == nil then return 'X' .. why end
if not v then return 0 end
local nl, pl = check(v, ARGV[5])
if nl == nil then return 'X' .. pl end
local now = now_ms()
local exp = num(v, 5, 17)
if string.byte(v, 3) ~= 80 or exp <= now or string.sub(v, 123, 122 + nl) ~= ARGV[2] then
  return 0
end
local e = now + tonumber(ARGV[3])
if exp > e then e = exp end
redis.call('SET', k, 'R3' .. string.sub(v, 3, 4) .. fmt(e) .. fmt(now) .. string.sub(v, 31),
  'PXAT', string.format('%.0f', e + tonumber(ARGV[4])))
return 1
