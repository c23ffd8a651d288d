-- get: KEYS[1] record; ARGV: channel.
-- Reply: the stored record untouched when live (or when its expiry does not
-- parse: the client's decoder reports it), nil when none or expired,
-- 'X'..why when the key holds something else.
local v, why = get(KEYS[1])
if v == nil then return 'X' .. why end
if not v then return false end
local m = string.sub(v, 1, 2)
if m ~= 'R3' then return 'Xunsupported record version' end
if flags(v) < 16 and bit.band(flags(v), 4) ~= 0 then
  return 'Xrelative times on a record that is not a fresh claim'
end
local exp = num(v, 5, 17)
if exp ~= nil and exp <= now_ms() then return false end
return v
