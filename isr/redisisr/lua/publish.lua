-- Recipe A. KEYS: LOCK, META[, REQ#]. ARGV: pk, token, now, s3_key,
-- generated_at, revalidate_seconds, etag ('' none), ttl ('' none),
-- monotonic ('1'), request_hash.
local reasons = {'None', 'None'}
local refused = false
if not leaseok(KEYS[1], ARGV[2], ARGV[3]) then
  reasons[1], refused = COND, true
end
if ARGV[9] == '1' then
  local g = redis.call('HGET', KEYS[2], 'generated_at')
  if g then
    local n = num(g)
    if n == nil or not (n < tonumber(ARGV[5])) then
      reasons[2], refused = COND, true
    end
  end
end
if #KEYS >= 3 then
  reasons[3] = 'None'
  if not requestok(KEYS[3], ARGV[10]) then
    reasons[3], refused = COND, true
  end
end
if refused then
  return {'REFUSED', reasons}
end
local f = {'pk', ARGV[1], 'sk', 'META', 's3_key', ARGV[4], 'generated_at', ARGV[5], 'revalidate_seconds', ARGV[6]}
if ARGV[7] ~= '' then
  f[#f + 1], f[#f + 2] = 'etag', ARGV[7]
end
if ARGV[8] ~= '' then
  f[#f + 1], f[#f + 2] = 'ttl', ARGV[8]
end
put(KEYS[2], f)
expire(KEYS[2], ARGV[3])
redis.call('DEL', KEYS[1])
if #KEYS >= 3 then
  redis.call('HSET', KEYS[3], 'status', 'COMPLETED', 'result_s3_key', ARGV[4])
end
return {'OK'}
