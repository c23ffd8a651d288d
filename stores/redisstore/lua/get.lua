-- get: KEYS[1] record; ARGV: channel.
-- Reply: {code, detail, fields}; 1 live record, 0 none (or expired),
-- 3 corrupt.
local k = KEYS[1]
local now = now_ms()
local flat, cur, why = load(k)
if why then
  return {CORRUPT, why, flat}
end
if cur == nil or cur.expires_at <= now then
  return {0, ''}
end
return {1, '', flat}
