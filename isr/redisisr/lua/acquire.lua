-- KEYS: LOCK, META. ARGV: pk, token, now, lease_expires_at, ttl, seen
-- generated_at ('' for no META guard).
local now = ARGV[3] -- exact decimal text
local lock, lockflat = load(KEYS[1])
local held = false
if lock then
  local exp, why = numattr(lock, 'lease_expires_at')
  if exp == nil then
    return {'CORRUPT', 'LOCK', 'lease_expires_at', why}
  end
  if cmpdec(lock['lease_expires_at'], now) > 0 then
    if lock['lease_token'] == ARGV[2] then
      return {'MINE', lockflat} -- a retried acquire: the lease is already ours
    end
    held = true
  end
end
local changed = false
if ARGV[6] ~= '' then
  local meta = load(KEYS[2])
  if meta then
    -- The generated_at the reader saw: the pointed VER# row's under
    -- recipe B, META's own otherwise.
    local src, sk = meta, 'META'
    local cur = meta['current_sk']
    if cur then
      if string.sub(cur, 1, 4) ~= 'VER#' or #cur == 4 then
        return {'CORRUPT', 'META', 'current_sk', 'not a VER# sort key: "' .. cur .. '"'}
      end
      src = load(string.sub(KEYS[2], 1, #KEYS[2] - 4) .. cur)
      if not src then
        return {'CORRUPT', 'META', 'current_sk', 'points to a missing row "' .. cur .. '"'}
      end
      sk = cur
    end
    local gen, why = numattr(src, 'generated_at')
    if gen == nil then
      return {'CORRUPT', sk, 'generated_at', why}
    end
    changed = cmpdec(src['generated_at'], ARGV[6]) > 0
  end
end
if held or changed then
  return {'REFUSED', held and 1 or 0, changed and 1 or 0, lockflat}
end
put(KEYS[1], {'pk', ARGV[1], 'sk', 'LOCK', 'lease_token', ARGV[2], 'lease_expires_at', ARGV[4], 'ttl', ARGV[5]})
expire(KEYS[1], now)
return {'OK'}
