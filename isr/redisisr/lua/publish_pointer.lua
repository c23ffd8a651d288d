-- Recipe B. KEYS: LOCK, VER#, META[, REQ#][, previous VER#]. ARGV: pk, token, now, VER# sk,
-- s3_key, generated_at, etag ('' none), VER# ttl ('' none),
-- revalidate_seconds, META ttl ('' none), expected version, new version,
-- monotonic ('1'), request_hash, previous VER# sk ('' none), its ttl.
-- The previous VER# row (META's current_sk, required to be ARGV[15]) is
-- the last key when ARGV[15] is not ''.
local hasPrev = ARGV[15] ~= ''
local hasReq = #KEYS - (hasPrev and 1 or 0) >= 4
local reasons = {'None', 'None', 'None'}
local refused, metaWhy = false, ''
if not leaseok(KEYS[1], ARGV[2], ARGV[3]) then
  reasons[1], refused = COND, true
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  reasons[2], refused = COND, true
end
local meta = load(KEYS[3])
local v = 0
if meta and meta['version'] then
  v = num(meta['version'])
end
if v == nil or v ~= tonumber(ARGV[11]) then
  reasons[3], refused, metaWhy = COND, true, 'version'
elseif ARGV[15] ~= '' and not (meta and meta['current_sk'] == ARGV[15]) then
  reasons[3], refused, metaWhy = COND, true, 'version'
elseif ARGV[13] == '1' and meta and meta['generated_at'] then
  local g = num(meta['generated_at'])
  if g == nil or not (g < tonumber(ARGV[6])) then
    reasons[3], refused, metaWhy = COND, true, 'newer'
  end
end
if hasReq then
  reasons[4] = 'None'
  if not requestok(KEYS[4], ARGV[14]) then
    reasons[4], refused = COND, true
  end
end
if refused then
  return {'REFUSED', reasons, metaWhy}
end
local f = {'pk', ARGV[1], 'sk', ARGV[4], 's3_key', ARGV[5], 'generated_at', ARGV[6]}
if ARGV[7] ~= '' then
  f[#f + 1], f[#f + 2] = 'etag', ARGV[7]
end
if ARGV[8] ~= '' then
  f[#f + 1], f[#f + 2] = 'ttl', ARGV[8]
end
put(KEYS[2], f)
expire(KEYS[2], ARGV[3])
-- META is updated, not replaced: attributes of other writers stay.
local m = {'pk', ARGV[1], 'sk', 'META', 's3_key', ARGV[5], 'generated_at', ARGV[6],
  'revalidate_seconds', ARGV[9], 'current_sk', ARGV[4], 'version', ARGV[12]}
if ARGV[7] ~= '' then
  m[#m + 1], m[#m + 2] = 'etag', ARGV[7]
else
  redis.call('HDEL', KEYS[3], 'etag')
end
if ARGV[10] ~= '' then
  m[#m + 1], m[#m + 2] = 'ttl', ARGV[10]
else
  redis.call('HDEL', KEYS[3], 'ttl')
end
redis.call('HSET', KEYS[3], unpack(m))
expire(KEYS[3], ARGV[3])
redis.call('DEL', KEYS[1])
-- The row META pointed to is superseded: its ttl lets it go.
if hasPrev and ARGV[15] ~= ARGV[4] then
  local prev = KEYS[#KEYS]
  if redis.call('EXISTS', prev) == 1 then
    redis.call('HSET', prev, 'ttl', ARGV[16])
    expire(prev, ARGV[3])
  end
end
if hasReq then
  redis.call('HSET', KEYS[4], 'status', 'COMPLETED', 'result_s3_key', ARGV[5])
end
return {'OK'}
