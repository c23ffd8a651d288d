-- get: KEYS[1] record; ARGV: channel, storage key.
-- Reply: the stored record untouched when live (or when its expiry does not
-- parse: the client's decoder reports it), nil when none or expired and
-- valid, 'X'..why when the key holds something else or a record that is
-- not valid (expired or not, as a claim judges it).
local v, why = get(KEYS[1])
if v == nil then return 'X' .. why end
if not v then return false end
local m = string.sub(v, 1, 2)
if m ~= 'R3' then return 'Xunsupported record version' end
if flags(v) < 16 and bit.band(flags(v), 4) ~= 0 then
  return 'Xrelative times on a record that is not a fresh claim'
end
local exp = num(v, 5, 17)
if exp ~= nil and exp <= now_ms() then
  local ok, bad = check(v, ARGV[2])
  if ok == nil then return 'X' .. bad end
  return false
end
return v
