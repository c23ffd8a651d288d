-- complete: KEYS[1] record; ARGV: channel, nonce, ttl ms,
-- status and flags (2 bytes), outcome lengths (25 bytes), outcome (result,
-- error message, error type), key.
-- The completed or failed record expires natively at its expires_at (a
-- record that is present is live, so a claim answers with it without a
-- clock). It publishes only when a waiter marked the record (watch.lua).
-- Reply: 1 done, 0 not the owner, 'X'..why corrupt.
local k = KEYS[1]
local v, why = get(k)
if v == nil then return 'X' .. why end
if not v then return 0 end
local nl, pl, kl = check(v, ARGV[7])
if nl == nil then return 'X' .. pl end
if string.sub(v, 123, 122 + nl) ~= ARGV[2] then return 0 end
local now = now_ms()
local e = now + tonumber(ARGV[3])
local nv = 'R3' .. ARGV[4] .. fmt(e) .. fmt(now) .. string.sub(v, 31, 43) .. fmt(now)
  .. string.sub(v, 57, 97) .. ARGV[5] .. string.sub(v, 123, 122 + nl + pl + kl) .. ARGV[6]
redis.call('SET', k, nv, 'PXAT', string.format('%.0f', e))
if watched(v) then redis.call('PUBLISH', ARGV[1], 'c') end
return 1
