-- claim: KEYS[1] record; ARGV: tail, lease ms, retention ms, presence
-- check, channel prefix, instance prefix, incarnation prefix, gone nonce.
-- The tail is the new record from offset 70 on: takeover ms, the six
-- lengths, nonce, payload hash, key, and the claim's owner (its length and
-- itself) when it has one. The change channel is KEYS[1]..':changed'.
-- Runs when the claim's SET NX GET found a record it cannot answer without
-- the server's clock (another caller's in-progress record) or a value that
-- is not a record.
-- A live in-progress record of another owner, not stale, is taken over when
-- its owner is known gone: an earlier incarnation of the claim's instance
-- (its owner starts with the instance prefix, not with the incarnation
-- prefix), or a process whose presence channel (channel prefix ..
-- '{' .. token .. '}:owner') has no subscriber: asked here with PUBSUB
-- SHARDNUMSUB when the presence check is 's' (the channel lives on this
-- server), else told by the client (gone nonce: the nonce of the record whose
-- owner the client found gone).
-- Reply, one bulk string: the stored record untouched (existing), 'C'..record
-- (claimed), 'T'..record (took over a stale claim), 'G'..record (took over
-- the claim of a gone owner) or 'X'..why (corrupt).
local k = KEYS[1]
local v, why = get(k)
if v == nil then return 'X' .. why end
local now = now_ms()
local tail = ARGV[1]
local function put(nv, e)
  redis.call('SET', k, nv, 'PXAT', string.format('%.0f', e + tonumber(ARGV[3])))
end
-- gone reports whether owner, the owner of the live record v whose nonce
-- has length nl, is known gone to a claim by rown.
local function gone(owner, rown, nl)
  if owner == '' or owner == rown then return false end
  local inst, inc = ARGV[6], ARGV[7]
  if inst ~= '' and string.sub(owner, 1, #inst) == inst and string.sub(owner, 1, #inc) ~= inc then
    return true
  end
  local tok = string.match(owner, '[^/]*$')
  if #tok ~= 32 or not string.find(tok, '^[0-9a-f]+$') then return false end
  if string.sub(v, 123, 122 + nl) == ARGV[8] then return true end
  if ARGV[4] ~= 's' then return false end
  local r = redis.pcall('PUBSUB', 'SHARDNUMSUB', ARGV[5] .. '{' .. tok .. '}:owner')
  return type(r) == 'table' and r[2] == 0
end
if v then
  local tnl, tpl, tkl = num(tail, 14, 18), num(tail, 19, 23), num(tail, 24, 28)
  local nl, pl, _, owner = check(v, string.sub(tail, 54 + tnl + tpl, 53 + tnl + tpl + tkl))
  if nl == nil then return 'X' .. pl end
  local exp = num(v, 5, 17)
  local attempt = num(v, 57, 69) + 1
  if exp > now then
    -- A live record that carries this claim's nonce is this claim, applied
    -- (whatever its status since): Claimed, untouched.
    if string.sub(v, 123, 122 + nl) == string.sub(tail, 54, 53 + tnl) then return 'C' .. v end
    if string.byte(v, 3) ~= 80 then return v end
    if string.sub(v, 123 + nl, 122 + nl + pl) ~= string.sub(tail, 54 + tnl, 53 + tnl + tpl) then
      return v
    end
    local tk = num(v, 70, 82)
    if tk == 0 then tk = num(tail, 1, 13) end
    local how = 'T'
    if now - num(v, 18, 30) < tk then
      if not gone(owner, string.sub(tail, 59 + tnl + tpl + tkl), nl) then return v end
      how = 'G'
    end
    local e = now + tonumber(ARGV[2])
    if exp > e then e = exp end
    -- The waiters of the taken claim wait for this one now: it keeps the
    -- watched flag, and they are told.
    local w = watched(v)
    local nv = 'R3P' .. (w and '8' or '0') .. fmt(e) .. fmt(now) .. fmt(now) .. fmt(0) .. fmt(attempt) .. tail
    put(nv, e)
    if w then redis.call('PUBLISH', k .. ':changed', 't') end
    return how .. nv
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
