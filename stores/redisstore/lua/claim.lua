-- claim: KEYS[1] record; ARGV: tail, lease ms, retention ms. The tail is the
-- new record from offset 70 on: takeover ms, the six lengths, nonce,
-- payload hash, key. The change channel is KEYS[1]..':changed'.
-- Runs when the claim's SET NX GET found a record it cannot answer without
-- the server's clock (another caller's in-progress record) or a value that
-- is not a record.
-- Reply, one bulk string: the stored record untouched (existing), 'C'..record
-- (claimed), 'T'..record (took over) or 'X'..why (corrupt).
local k = KEYS[1]
local v, why = get(k)
if v == nil then return 'X' .. why end
local now = now_ms()
local tail = ARGV[1]
local function put(nv, e)
  redis.call('SET', k, nv, 'PXAT', string.format('%.0f', e + tonumber(ARGV[3])))
end
if v then
  local tnl, tpl = num(tail, 14, 18), num(tail, 19, 23)
  local nl, pl = check(v, string.sub(tail, 54 + tnl + tpl))
  if nl == nil then return 'X' .. pl end
  local exp = num(v, 5, 17)
  local attempt = num(v, 57, 69) + 1
  if exp > now then
    -- A live record that carries this claim's nonce is this claim, applied
    -- (whatever its status since): Claimed, untouched.
    if string.sub(v, 123, 122 + nl) == string.sub(tail, 54, 53 + tnl) then return 'C' .. v end
    if string.byte(v, 3) ~= 80 then return v end
    local tk = num(v, 70, 82)
    if tk == 0 then tk = num(tail, 1, 13) end
    if now - num(v, 18, 30) < tk
      or string.sub(v, 123 + nl, 122 + nl + pl) ~= string.sub(tail, 54 + tnl, 53 + tnl + tpl) then
      return v
    end
    local e = now + tonumber(ARGV[2])
    if exp > e then e = exp end
    -- The waiters of the stale claim wait for this one now: it keeps the
    -- watched flag, and they are told.
    local w = watched(v)
    local nv = 'R3P' .. (w and '8' or '0') .. fmt(e) .. fmt(now) .. fmt(now) .. fmt(0) .. fmt(attempt) .. tail
    put(nv, e)
    if w then redis.call('PUBLISH', k .. ':changed', 't') end
    return 'T' .. nv
  end
  local e = now + tonumber(ARGV[2])
  local nv = 'R3P0' .. fmt(e) .. fmt(now) .. fmt(now) .. fmt(0) .. fmt(attempt) .. tail
  put(nv, e)
  if watched(v) then redis.call('PUBLISH', k .. ':changed', 'c') end
  return 'C' .. nv
end
local e = now + tonumber(ARGV[2])
put('R3P0' .. fmt(e) .. fmt(now) .. fmt(now) .. fmt(0) .. fmt(1) .. tail, e)
return 'C' .. 'R3P0' .. fmt(e) .. fmt(now) .. fmt(now) .. fmt(0) .. fmt(1) .. tail
